-- wrk script: POST a different real request body each time, and count non-2xx answers.
--
--   wrk -t2 -c32 -d10s -s rotate.lua http://127.0.0.1:PORT/predict -- BODIES_FILE
--
-- BODIES_FILE holds one JSON body per line. Each thread formats every request once in
-- init() so that request() costs a table lookup: wrk shares the two cores with the
-- server, and per-request string building would be load-generator time charged to it.
-- done() prints one line "WRK_JSON {...}" that bench/loadgen/wrk.py parses.

local threads = {}
local counter = 0

function setup(thread)
   thread:set("id", counter)
   counter = counter + 1
   table.insert(threads, thread)
end

function init(args)
   local path = args[1]
   local headers = { ["Content-Type"] = "application/json" }
   requests_ = {}
   for line in io.lines(path) do
      if #line > 0 then
         requests_[#requests_ + 1] = wrk.format("POST", wrk.path, headers, line)
      end
   end
   if #requests_ == 0 then
      error("no request bodies in " .. path)
   end
   -- Threads start at different bodies so two threads do not send the same row at once.
   index_ = (id * 7919) % #requests_
   non2xx = 0
   first_bad = ""
end

function request()
   index_ = index_ % #requests_ + 1
   return requests_[index_]
end

-- wrk itself only counts status > 399 as an error; a 1xx or 3xx is a failure here too.
function response(status, headers, body)
   if status < 200 or status > 299 then
      non2xx = non2xx + 1
      if first_bad == "" then
         first_bad = tostring(status) .. " " .. string.sub(body or "", 1, 200)
      end
   end
end

local function quote(s)
   s = string.gsub(s, '[%c"\\]', function(c)
      return string.format("\\u%04x", string.byte(c))
   end)
   return '"' .. s .. '"'
end

function done(summary, latency, requests)
   local non2xx_total, sample = 0, ""
   for _, thread in ipairs(threads) do
      non2xx_total = non2xx_total + (thread:get("non2xx") or 0)
      local bad = thread:get("first_bad") or ""
      if sample == "" then sample = bad end
   end
   local e = summary.errors
   io.write(string.format(
      'WRK_JSON {"duration_us": %d, "requests": %d, "bytes": %d, "non2xx": %d, '
         .. '"errors": {"connect": %d, "read": %d, "write": %d, "status": %d, "timeout": %d}, '
         .. '"latency_us": {"mean": %.1f, "stdev": %.1f, "min": %d, "max": %d, '
         .. '"p50": %d, "p90": %d, "p99": %d}, "first_bad": %s}\n',
      summary.duration, summary.requests, summary.bytes, non2xx_total,
      e.connect, e.read, e.write, e.status, e.timeout,
      latency.mean, latency.stdev, latency.min, latency.max,
      latency:percentile(50), latency:percentile(90), latency:percentile(99),
      quote(sample)))
end
