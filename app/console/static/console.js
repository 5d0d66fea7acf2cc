// The audit console's only script: conveniences over pages that work without it.
"use strict";
document.addEventListener("DOMContentLoaded", () => {
  // A click anywhere on a record's row opens it; the request id stays the keyboard's link.
  for (const row of document.querySelectorAll("tr[data-href]")) {
    row.addEventListener("click", (event) => {
      if (event.target.closest("a")) return;
      window.location.assign(row.dataset.href);
    });
  }
  // The sweep's slider reads the weights at one value off the drawn series.
  const slider = document.getElementById("sweep-slider");
  const readout = document.getElementById("sweep-readout");
  if (slider && readout) {
    const xs = slider.dataset.x.split(" ").map(Number);
    const series = [...document.querySelectorAll("#sweep-chart .series")].map((g) => ({
      name: g.dataset.expert,
      values: g.dataset.values.split(" "),
    }));
    const show = () => {
      const i = Number(slider.value);
      const parts = series.map((s) => `${s.name} ${Number(s.values[i]).toFixed(3)}`);
      readout.textContent = `at ${xs[i].toPrecision(4)}: ${parts.join(", ")}`;
    };
    slider.addEventListener("input", show);
    show();
  }
});
