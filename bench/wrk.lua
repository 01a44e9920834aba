-- tenantgate benchmark driver for wrk: every connection creates pods, one after another.
--
-- A pod's creation is two requests on one connection, in the order the API server sends them:
-- its /mutate review, then its /validate review. Run wrk with as many threads as connections,
-- so that each thread drives a single connection and its requests alternate in that order.
-- Bodies are templates whose slots are filled with per-pod ids computed by the bench (request
-- uids, pod uid, name suffix and the reservation id /mutate derives from its request uid), so
-- every pod is new to the webhook, as on a real cluster.
--
-- Usage: wrk -t N -c N -d D -s wrk.lua URL -- TEMPLATES.lua IDS.txt N
-- Prints one line "BENCH-JSON {...}" with the summary the bench reads.

local threads = {}
local next_id = 0

function setup(thread)
  thread:set("thread_id", next_id)
  next_id = next_id + 1
  table.insert(threads, thread)
end

function init(args)
  templates = assert(loadfile(args[1]))()
  ids = {}
  for line in io.lines(args[2]) do
    local fields = {}
    for field in string.gmatch(line, "%S+") do
      fields[#fields + 1] = field
    end
    ids[#ids + 1] = fields
  end
  nthreads = tonumber(args[3])
  pair = thread_id
  second = false
  bad = 0
  wrapped = 0
  headers = {["Content-Type"] = "application/json"}
end

local function render(doc, values)
  local out = {}
  local parts, slots = doc.parts, doc.slots
  for i = 1, #slots do
    out[#out + 1] = parts[i]
    out[#out + 1] = values[slots[i]]
  end
  out[#out + 1] = parts[#parts]
  return table.concat(out)
end

function request()
  local template = templates[(pair % #templates) + 1]
  local id = ids[(pair % #ids) + 1]
  if not second then
    second = true
    return wrk.format("POST", "/mutate", headers, render(template.mutate, {uid = id[1]}))
  end
  second = false
  if pair >= #ids then
    wrapped = wrapped + 1
  end
  pair = pair + nthreads
  local values = {uid = id[2], rid = id[3], ["pod-uid"] = id[4], suffix = id[5]}
  return wrk.format("POST", "/validate", headers, render(template.validate, values))
end

function response(status, headers, body)
  if status ~= 200 or not string.find(body, '"allowed":true', 1, true) then
    bad = bad + 1
  end
end

function done(summary, latency, requests)
  local not_allowed, wrapped_pairs = 0, 0
  for _, thread in ipairs(threads) do
    not_allowed = not_allowed + (thread:get("bad") or 0)
    wrapped_pairs = wrapped_pairs + (thread:get("wrapped") or 0)
  end
  local errors = summary.errors
  io.write(string.format(
    'BENCH-JSON {"requests":%d,"duration_us":%d,"bytes":%d,"connect_errors":%d,' ..
    '"read_errors":%d,"write_errors":%d,"status_errors":%d,"timeouts":%d,' ..
    '"not_allowed":%d,"wrapped_pairs":%d,"p50_us":%d,"p90_us":%d,"p99_us":%d,' ..
    '"max_us":%d,"mean_us":%.1f}\n',
    summary.requests, summary.duration, summary.bytes, errors.connect, errors.read,
    errors.write, errors.status, errors.timeout, not_allowed, wrapped_pairs,
    latency:percentile(50), latency:percentile(90), latency:percentile(99),
    latency.max, latency.mean))
end
