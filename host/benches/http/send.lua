-- POST /v1/send with the secret key: one recipient per request (a new contact each time), a
-- subject and an HTML body rendered with a fallback, one link (click-tracked) and the open pixel.
-- HERALD_BENCH_FROM picks the sender: on a verified domain the message is DKIM-signed
-- (RSA-2048), on an unverified one (allowed by domains.allow_unverified) it is not.
-- With HERALD_BENCH_TEMPLATE (a template id) the request names that stored template instead of
-- carrying a subject and body, and passes the order number as data.
local counter = 0
local thread_id = 0
local from = os.getenv("HERALD_BENCH_FROM")
local template = os.getenv("HERALD_BENCH_TEMPLATE")
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Authorization"] = "Bearer " .. os.getenv("HERALD_BENCH_KEY")
setup = function(thread)
  thread_id = thread_id + 1
  thread:set("tid", thread_id)
end
request = function()
  counter = counter + 1
  if template then
    return wrk.format(nil, "/v1/send", nil, string.format(
      '{"to":"r%d-%d-%d@example.com","from":"%s","template":"%s",' ..
      '"data":{"firstName":"Ann","order":"%d"}}',
      tid or 0, os.time(), counter, from, template, counter))
  end
  local body = string.format(
    '{"to":"r%d-%d-%d@example.com","from":"%s","subject":"Your order {{order ?? \\"#1\\"}}",' ..
    '"body":"<html><body><p>Hello {{firstName ?? \\"there\\"}},</p><p>Thanks for your order. ' ..
    '<a href=\\"https://shop.example/orders/%d\\">See it here</a>.</p></body></html>",' ..
    '"data":{"firstName":"Ann"}}',
    tid or 0, os.time(), counter, from, counter)
  return wrk.format(nil, "/v1/send", nil, body)
end
