-- POST /v1/verify with the secret key, cycling through 100 addresses on 96 domains of the
-- benchmark's loopback DNS server (dnsd.py): ordinary, plus-addressed, quoted and IDN local
-- parts and domains, a personal provider, a typo, a disposable domain and a nonexistent one.
-- After the first round every domain's DNS facts come from the cache.
local counter = 0
local emails = {}
for i = 0, 91 do
  emails[#emails + 1] = string.format("person.%d+tag%d@company-%d.example", i, i % 7, i)
end
emails[#emails + 1] = '\\"John Doe\\"@company-1.example'
emails[#emails + 1] = "user@b\195\188cher.example"
emails[#emails + 1] = "ann+news@gmail.com"
emails[#emails + 1] = "ann@yaho.com"
emails[#emails + 1] = "ann@mailinator.com"
emails[#emails + 1] = "ann@nxdomain.example"
emails[#emails + 1] = "ann@hotmial.con"
emails[#emails + 1] = "not an address"
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Authorization"] = "Bearer " .. os.getenv("HERALD_BENCH_KEY")
request = function()
  counter = counter + 1
  local body = '{"email":"' .. emails[(counter % #emails) + 1] .. '"}'
  return wrk.format(nil, "/v1/verify", nil, body)
end
