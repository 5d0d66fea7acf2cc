-- wrk script: POST binary bodies (the OIP binary tensor data extension) in rotation, and
-- count non-2xx answers. The same counting and result line as rotate.lua.
--
--   wrk -t2 -c8 -d10s -s frames.lua http://127.0.0.1:PORT/v2/models/NAME/infer -- FRAMES
--
-- FRAMES holds records "<json header length> <body length>\n<body bytes>", one per body
-- (bench/loadgen/bodies.py writes them): binary bodies cannot be one per line. Like
-- tritonclient, requests carry Inference-Header-Content-Length and no Content-Type.

local threads = {}
local counter = 0

function setup(thread)
   thread:set("id", counter)
   counter = counter + 1
   table.insert(threads, thread)
end

function init(args)
   local f = assert(io.open(args[1], "rb"))
   requests_ = {}
   while true do
      local line = f:read("*l")
      if line == nil or #line == 0 then break end
      local header_len, body_len = string.match(line, "^(%d+) (%d+)$")
      local body = f:read(tonumber(body_len))
      local headers = { ["Inference-Header-Content-Length"] = header_len }
      requests_[#requests_ + 1] = wrk.format("POST", wrk.path, headers, body)
   end
   f:close()
   if #requests_ == 0 then
      error("no request bodies in " .. args[1])
   end
   index_ = (id * 7919) % #requests_
   non2xx = 0
   first_bad = ""
end

function request()
   index_ = index_ % #requests_ + 1
   return requests_[index_]
end

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
