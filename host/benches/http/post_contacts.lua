-- POST /contacts with a new address on every request (each wrk thread has its own prefix).
local counter = 0
local prefix = tostring(math.random(1, 1e9))
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Authorization"] = "Bearer " .. os.getenv("HERALD_BENCH_KEY")
request = function()
  counter = counter + 1
  local body = string.format('{"email":"bench-%s-%d@example.com","data":{"plan":"pro","seats":%d,"signup":"2024-05-01"}}', prefix, counter, counter % 50)
  return wrk.format(nil, "/contacts", nil, body)
end
