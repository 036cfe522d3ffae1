-- wrk script for the tensord benchmark.
-- BENCH_RANGE (optional): the Range header every request carries, e.g. "bytes=0-7".
-- done() prints one JSON line that bench/run.py parses; latencies are in microseconds.
local range = os.getenv("BENCH_RANGE")
if range ~= nil and range ~= "" then
   wrk.headers["Range"] = range
end

function done(summary, latency, requests)
   local e = summary.errors
   io.write(string.format(
      'BENCH_JSON {"requests":%d,"duration_us":%d,"bytes":%d,' ..
      '"errors":{"connect":%d,"read":%d,"write":%d,"status":%d,"timeout":%d},' ..
      '"lat_mean_us":%.1f,"lat_p50_us":%d,"lat_p90_us":%d,"lat_p99_us":%d,"lat_max_us":%d}\n',
      summary.requests, summary.duration, summary.bytes,
      e.connect, e.read, e.write, e.status, e.timeout,
      latency.mean, latency:percentile(50), latency:percentile(90),
      latency:percentile(99), latency.max))
end
