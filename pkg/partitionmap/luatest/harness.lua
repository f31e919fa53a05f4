-- Runs a generated chunk (DATA + logic) outside Envoy with a stub request handle.
-- usage: luajit harness.lua CHUNK REQUESTS [BENCH_ROUNDS] (pkg/partitionmap/luatest writes both)
-- REQUESTS: one request per line, five tab-separated hex fields (product, x-spatial-bbox,
-- x-spatial-crs, :path, x-request-id); a field of "-" is an absent header.
-- Prints one line per request: status, reason, cluster (tab-separated), as Envoy would
-- see them: a respond() call, or the x-spatial-cluster header the router reads.
local chunk, reqfile, rounds = arg[1], arg[2], tonumber(arg[3] or "0")
dofile(chunk)

local function unhex(s)
  if s == "-" then return nil end
  return (s:gsub("%x%x", function(h) return string.char(tonumber(h, 16)) end))
end

local requests = {}
for line in io.lines(reqfile) do
  local f, k = {}, 0
  for field in (line .. "\t"):gmatch("([^\t]*)\t") do
    k = k + 1
    f[k] = unhex(field) -- an absent header leaves a hole, so index explicitly
  end
  requests[#requests + 1] = f
end

local function stub(product, hdrs)
  local h = { md = {} }
  local headers = {}
  function headers:get(k) return hdrs[k] end
  function headers:replace(k, v) hdrs[k] = v end
  function headers:remove(k) hdrs[k] = nil end
  local meta = {}
  function meta:get(k) if k == "product" then return product end return nil end
  local dyn = {}
  function dyn:set(ns, k, v)
    if ns ~= "spatial" then error("dynamic metadata namespace " .. ns) end
    h.md[k] = v
  end
  function dyn:get(ns)
    if ns ~= "spatial" then return nil end
    return h.md
  end
  local si = {}
  function si:dynamicMetadata() return dyn end
  function h:headers() return headers end
  function h:metadata() return meta end
  function h:streamInfo() return si end
  function h:respond(rh, body) h.resp = rh; h.body = body end
  return h
end

if rounds > 0 then
  -- Pure decision cost: the decide() the handle entry point calls, over every request.
  local decide = SPATIAL_DECIDE
  local n = #requests
  local t0 = os.clock()
  for _ = 1, rounds do
    for i = 1, n do
      local r = requests[i]
      decide(r[1] or "", r[2], r[3], r[4], r[5])
    end
  end
  local t1 = os.clock()
  print(string.format("decisions\t%d\tns_per_decision\t%.1f", rounds * n, (t1 - t0) * 1e9 / (rounds * n)))
  return
end

local out = {}
for i = 1, #requests do
  local r = requests[i]
  -- A client-supplied x-spatial-cluster is stripped by the header-mutation filter before
  -- the script runs; the stub starts from the same state.
  local hdrs = { ["x-spatial-bbox"] = r[2], ["x-spatial-crs"] = r[3], [":path"] = r[4], ["x-request-id"] = r[5] }
  local h = stub(r[1], hdrs)
  envoy_on_request(h)
  if h.md.version ~= SPATIAL_VERSION then error("request " .. i .. ": dynamic metadata version " .. tostring(h.md.version)) end
  -- The response side echoes the decision on every answer.
  local resp = {}
  local rh = stub(r[1], resp)
  rh.md = h.md
  envoy_on_response(rh)
  if resp["x-spatial-reason"] ~= h.md.reason or resp["x-spatial-version"] ~= SPATIAL_VERSION then
    error("request " .. i .. ": response headers " .. tostring(resp["x-spatial-reason"]) .. " " .. tostring(resp["x-spatial-version"]))
  end
  if h.resp then
    out[#out + 1] = h.resp[":status"] .. "\t" .. h.resp["x-spatial-reason"] .. "\t"
  else
    local c = hdrs["x-spatial-cluster"]
    if c ~= h.md.cluster then error("request " .. i .. ": header " .. tostring(c) .. " but metadata " .. tostring(h.md.cluster)) end
    out[#out + 1] = "200\t" .. h.md.reason .. "\t" .. c
  end
end
io.write(table.concat(out, "\n"), "\n")
