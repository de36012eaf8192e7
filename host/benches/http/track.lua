-- POST /v1/track with the public key: a new contact every 10 requests, a new event every time.
local counter = 0
local prefix = tostring(math.random(1, 1e9))
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Authorization"] = "Bearer " .. os.getenv("HERALD_BENCH_PUBLIC_KEY")
request = function()
  counter = counter + 1
  local body = string.format('{"email":"t-%s-%d@example.com","event":"page_view","data":{"path":"/p/%d","plan":"pro"}}', prefix, math.floor(counter / 10), counter % 50)
  return wrk.format(nil, "/v1/track", nil, body)
end
