-- wrk script: POST real request bodies in rotation (one JSON body per line of $BENCH_BODIES) and
-- print a machine-readable summary line ("BENCH_JSON {...}") when the run ends.
local bodies = {}
for line in io.lines(os.getenv("BENCH_BODIES")) do
  if #line > 0 then bodies[#bodies + 1] = line end
end

local thread_count = 0
function setup(thread)
  -- threads start at different bodies so that they do not send the same input in lockstep
  thread:set("start", thread_count * 7919)
  thread_count = thread_count + 1
end

local counter = 0
function init(args)
  counter = tonumber(start) or 0
  wrk.method = "POST"
  wrk.headers["Content-Type"] = "application/json"
end

function request()
  counter = counter + 1
  return wrk.format(nil, nil, nil, bodies[(counter % #bodies) + 1])
end

function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    'BENCH_JSON {"requests": %d, "duration_us": %d, "bytes": %d, ' ..
    '"errors": {"connect": %d, "read": %d, "write": %d, "status": %d, "timeout": %d}, ' ..
    '"latency_us": {"p50": %d, "p90": %d, "p99": %d, "mean": %.1f, "max": %d}}\n',
    summary.requests, summary.duration, summary.bytes,
    e.connect, e.read, e.write, e.status, e.timeout,
    latency:percentile(50), latency:percentile(90), latency:percentile(99), latency.mean, latency.max))
end
