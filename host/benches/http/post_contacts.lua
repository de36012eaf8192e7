-- POST /contacts with a new address on every request (each wrk thread has its own prefix).
local counter = 0
-- Each wrk thread is its own Lua state with the same unseeded `math.random`, so the prefix is
-- the thread's number (given by `setup` in the main state) and the start time instead.
local thread_id = 0
local prefix = "x"
setup = function(thread)
  thread_id = thread_id + 1
  thread:set("tid", thread_id)
end
init = function(args)
  prefix = string.format("%d-%d", tid or 0, os.time())
end
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Authorization"] = "Bearer " .. os.getenv("HERALD_BENCH_KEY")
request = function()
  counter = counter + 1
  local body = string.format('{"email":"bench-%s-%d@example.com","data":{"plan":"pro","seats":%d,"signup":"2024-05-01"}}', prefix, counter, counter % 50)
  return wrk.format(nil, "/contacts", nil, body)
end
