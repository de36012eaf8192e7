-- POST /v1/track with the public key: a new contact every 10 requests, a new event every time.
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
wrk.headers["Authorization"] = "Bearer " .. os.getenv("HERALD_BENCH_PUBLIC_KEY")
request = function()
  counter = counter + 1
  local body = string.format('{"email":"t-%s-%d@example.com","event":"page_view","data":{"path":"/p/%d","plan":"pro"}}', prefix, math.floor(counter / 10), counter % 50)
  return wrk.format(nil, "/v1/track", nil, body)
end
