-- wrk script: POST one JSON body after another from a file (one body a line), and print wrk's figures as one
-- JSON line at the end. Used by benchmarks/bench_efficiency.py:
--
--     wrk -t1 -c8 -d20s --timeout 60s -s benchmarks/wrk_post_bodies.lua http://127.0.0.1:8000 -- BODIES.jsonl /v1/score
--
-- The requests are formatted once, in init(); request() only hands out the next one (each thread starts at its own
-- place in the list).

local requests = {}
local n = 0
local i = 0

function init(args)
  local path = args[2] or "/v1/score"
  for line in io.lines(args[1]) do
    if #line > 0 then
      n = n + 1
      requests[n] = wrk.format("POST", path, {["Content-Type"] = "application/json"}, line)
    end
  end
  if n == 0 then
    error("no bodies in " .. args[1])
  end
  i = math.random(n) - 1
end

function request()
  i = i % n + 1
  return requests[i]
end

function done(summary, latency, _)
  local e = summary.errors
  io.write(string.format(
    'WRK_JSON {"requests": %d, "duration_us": %d, "p50_us": %.1f, "p99_us": %.1f, "mean_us": %.1f, '
    .. '"errors": {"connect": %d, "read": %d, "write": %d, "status": %d, "timeout": %d}}\n',
    summary.requests, summary.duration, latency:percentile(50), latency:percentile(99), latency.mean,
    e.connect, e.read, e.write, e.status, e.timeout))
end
