-- Poise spatial routing: the fixed decision logic. The control plane prepends
-- "local DATA = {...}" (see pkg/partitionmap RenderData) and ships both as one
-- LuaPerRoute chunk per VirtualHost. pkg/partitionmap.Decide is the reference: every
-- rule below repeats it with the same float expressions. Written for Lua 5.1 and
-- LuaJIT: no bit library, no goto, no integer division, no pairs()-ordered decisions,
-- no tostring of floats, no multiple assignment that reads its own targets.
local floor, min, max = math.floor, math.min, math.max
local byte, sub, find, lower, gsub, char = string.byte, string.sub, string.find, string.lower, string.gsub, string.char
local tonumber = tonumber
local HUGE = math.huge

local MAX_BBOX_LEN = 256
local MAX_NUMBER_LEN = 32

local CRS = {
  [""] = 1, ["crs84"] = 1, ["ogc:crs84"] = 1, ["crs84h"] = 1, ["ogc:crs84h"] = 1,
  ["http://www.opengis.net/def/crs/ogc/1.3/crs84"] = 1,
  ["https://www.opengis.net/def/crs/ogc/1.3/crs84"] = 1,
  ["http://www.opengis.net/def/crs/ogc/0/crs84h"] = 1,
  ["https://www.opengis.net/def/crs/ogc/0/crs84h"] = 1,
  ["urn:ogc:def:crs:ogc:1.3:crs84"] = 1,
  ["urn:ogc:def:crs:ogc::crs84"] = 1,
  ["epsg:4326"] = 2,
  ["http://www.opengis.net/def/crs/epsg/0/4326"] = 2,
  ["https://www.opengis.net/def/crs/epsg/0/4326"] = 2,
  ["urn:ogc:def:crs:epsg::4326"] = 2,
}

local GRID = DATA.grid
local MAX_CELLS = DATA.max_cells
local CAP = DATA.cap_pct
local XMIN, XMAX, YMIN, YMAX = DATA.xmin, DATA.xmax, DATA.ymin, DATA.ymax
local REPLICAS = DATA.replicas
local PRODUCTS = DATA.products

-- CELLS[kx][ky] is the list of partitions of a cell, expanded once, when the chunk
-- loads, from DATA's runs {first row, last row, list}; cells sharing a list share
-- the table. pairs() only builds the table: its order decides nothing.
local CELLS = {}
do
  local lists = DATA.lists
  for kx, col in pairs(DATA.runs) do
    local t = {}
    for i = 1, #col, 3 do
      local l = lists[col[i + 2]]
      for ky = col[i], col[i + 1] do
        t[ky] = l
      end
    end
    CELLS[kx] = t
  end
end
local HOLDERS = DATA.holders

-- Scratch state reused by every request of this worker: a decision never yields, so
-- two requests never interleave inside decide().
local SEEN, SCORE = {}, {}
local STAMP = 0

-- ^[+-]?(\d+\.?\d*|\.\d+)$, at most MAX_NUMBER_LEN bytes, then a finite value.
local function strict_number(s)
  local n = #s
  if n == 0 or n > MAX_NUMBER_LEN then return nil end
  local i = 1
  local c = byte(s, 1)
  if c == 43 or c == 45 then i = 2 end
  local digits, dot = 0, false
  while i <= n do
    c = byte(s, i)
    if c >= 48 and c <= 57 then
      digits = digits + 1
    elseif c == 46 and not dot then
      dot = true
    else
      return nil
    end
    i = i + 1
  end
  if digits == 0 then return nil end
  if byte(s, 1) == 43 then s = sub(s, 2) end
  local v = tonumber(s)
  if v == nil or not (v > -HUGE and v < HUGE) then return nil end
  return v
end

-- parse_bbox returns west, south, east, north in CRS84, or nil and a reason.
local function parse_bbox(raw, crs)
  local order = CRS[lower(crs)]
  if #crs > 64 then order = nil end
  if not order then return nil, "crs" end
  if #raw > MAX_BBOX_LEN then return nil, "length" end
  local commas, pos = 0, 1
  while true do
    local c = find(raw, ",", pos, true)
    if not c then break end
    commas = commas + 1
    pos = c + 1
  end
  if commas ~= 3 and commas ~= 5 then return nil, "arity" end
  local v1, v2, v3, v4, v5, v6
  local k, start = 0, 1
  while true do
    local c = find(raw, ",", start, true)
    local field
    if c then field = sub(raw, start, c - 1) else field = sub(raw, start) end
    local v = strict_number(field)
    if v == nil then return nil, "number" end
    k = k + 1
    if k == 1 then v1 = v elseif k == 2 then v2 = v elseif k == 3 then v3 = v
    elseif k == 4 then v4 = v elseif k == 5 then v5 = v else v6 = v end
    if not c then break end
    start = c + 1
  end
  local a1, a2, b1, b2
  if k == 4 then
    a1 = v1; a2 = v2; b1 = v3; b2 = v4
  else
    a1 = v1; a2 = v2; b1 = v4; b2 = v5
  end
  local w, s, e, n = a1, a2, b1, b2
  if order == 2 then
    w = a2; s = a1; e = b2; n = b1
  end
  if not (w >= -180 and w <= 180 and e >= -180 and e <= 180 and s >= -90 and s <= 90 and n >= -90 and n <= 90) then
    return nil, "range"
  end
  if not (s <= n) then return nil, "order" end
  return w, s, e, n
end

local function unescape(s)
  if not find(s, "[%%+]") then return s end
  s = gsub(s, "%+", " ")
  s = gsub(s, "%%(%x%x)", function(h) return char(tonumber(h, 16)) end)
  return s
end

-- scan_query returns the number of bbox parameters and the first, the same for bbox-crs.
local function scan_query(path)
  local nb, bbox, nc, crs = 0, nil, 0, nil
  local q = find(path, "?", 1, true)
  if not q then return nb, bbox, nc, crs end
  local pos, n = q + 1, #path
  while pos <= n do
    local amp = find(path, "&", pos, true) or (n + 1)
    if amp > pos then
      local piece = sub(path, pos, amp - 1)
      local eq = find(piece, "=", 1, true)
      local k, v
      if eq then k = sub(piece, 1, eq - 1); v = sub(piece, eq + 1) else k = piece; v = "" end
      k = unescape(k)
      if k == "bbox" then
        nb = nb + 1
        if nb == 1 then bbox = unescape(v) end
      elseif k == "bbox-crs" then
        nc = nc + 1
        if nc == 1 then crs = unescape(v) end
      end
    end
    pos = amp + 1
  end
  return nb, bbox, nc, crs
end

-- axis_range: the cell index range touched by [lo, hi] (see partitionmap.axisRange).
local function axis_range(lo, hi, kmin, kmax)
  local g = GRID
  local f0 = floor(lo / g)
  if f0 * g > lo then f0 = f0 - 1 elseif (f0 + 1) * g <= lo then f0 = f0 + 1 end
  local f1 = f0
  if hi > lo then
    f1 = floor(hi / g)
    if f1 * g >= hi then f1 = f1 - 1 elseif (f1 + 1) * g < hi then f1 = f1 + 1 end
  end
  f0 = max(kmin, min(kmax, f0))
  f1 = max(kmin, min(kmax, f1))
  return f0, f1
end

local function bucket(id)
  local h = 0
  for i = 1, #id do
    h = (h * 31 + byte(id, i)) % 2147483647
  end
  return h % 100
end

-- decide returns status, reason and, for 200, the cluster.
local function decide(product, hbbox, hcrs, path, request_id)
  local p = PRODUCTS[product]
  if not p then return 404, "unknown_product" end
  local raw, crs = hbbox, hcrs
  if raw == nil or raw == "" or crs == nil or crs == "" then
    local nb, qb, nc, qc = scan_query(path or "")
    if raw == nil or raw == "" then
      if nb == 0 then raw = nil elseif nb > 1 then return 400, "bad_bbox:duplicate" else raw = qb end
    end
    if raw ~= nil and (crs == nil or crs == "") then
      if nc > 1 then return 400, "bad_bbox:duplicate" end
      crs = qc or ""
    end
  end
  local w, s, e, n
  if raw ~= nil then
    local reason
    w, s, e, n = parse_bbox(raw, crs)
    if w == nil then return 400, "bad_bbox:" .. s end
  end

  local lawful = p.lawful
  if #lawful == 0 then return 451, "residency" end
  local any = false
  for i = 1, #lawful do
    if REPLICAS[lawful[i]].healthy then any = true; break end
  end
  if not any then return 503, "unhealthy" end
  if raw == nil then return 200, "no_bbox", p.pool end
  if CAP >= 0 and bucket(request_id or "") >= CAP then return 200, "capped", p.pool end

  local yl, yh = axis_range(s, n, YMIN, YMAX)
  local x1l, x1h, x2l, x2h
  if w > e then
    local w0, w1 = axis_range(-180, e, XMIN, XMAX)
    local e0, e1 = axis_range(w, 180, XMIN, XMAX)
    if w1 >= e0 then
      x1l = w0; x1h = e1
    else
      x1l = w0; x1h = w1; x2l = e0; x2h = e1
    end
  else
    x1l, x1h = axis_range(w, e, XMIN, XMAX)
  end
  local width = x1h - x1l + 1
  if x2l then width = width + x2h - x2l + 1 end
  if width * (yh - yl + 1) > MAX_CELLS then return 200, "too_many_cells", p.pool end

  STAMP = STAMP + 1
  local stamp = STAMP
  for i = 1, #lawful do SCORE[lawful[i]] = 0 end
  for pass = 1, 2 do
    local lo, hi = x1l, x1h
    if pass == 2 then lo = x2l; hi = x2h end
    if lo then
      for kx = lo, hi do
        local col = CELLS[kx]
        if col then
          for ky = yl, yh do
            local parts = col[ky]
            if parts then
              for j = 1, #parts do
                local pi = parts[j]
                if SEEN[pi] ~= stamp then
                  SEEN[pi] = stamp
                  local hs = HOLDERS[pi]
                  for h = 1, #hs do
                    local r = hs[h]
                    SCORE[r] = (SCORE[r] or 0) + 1
                  end
                end
              end
            end
          end
        end
      end
    end
  end
  local best, best_score = nil, 0
  for i = 1, #lawful do
    local r = lawful[i]
    local sc = SCORE[r]
    if REPLICAS[r].healthy and sc > best_score then best = r; best_score = sc end
  end
  -- SCORE of replicas outside this product was bumped too; reset lazily next time.
  if best == nil then return 200, "no_partition", p.pool end
  return 200, "locality", REPLICAS[best].cluster
end

-- Exported for tests and offline runs that load this chunk outside Envoy.
SPATIAL_DECIDE = decide
SPATIAL_VERSION = DATA.version

function envoy_on_request(handle)
  local headers = handle:headers()
  local product = handle:metadata():get("product")
  local ok, status, reason, cluster = pcall(decide, product or "", headers:get("x-spatial-bbox"),
    headers:get("x-spatial-crs"), headers:get(":path"), headers:get("x-request-id"))
  if not ok then
    status = 503; reason = "script_error"; cluster = nil
  end
  local md = handle:streamInfo():dynamicMetadata()
  md:set("spatial", "version", DATA.version)
  md:set("spatial", "reason", reason)
  md:set("spatial", "cluster", cluster or "")
  if status ~= 200 then
    handle:respond({[":status"] = tostring(status), ["x-spatial-reason"] = reason,
      ["x-spatial-version"] = DATA.version, ["content-type"] = "text/plain"}, reason .. "\n")
    return
  end
  headers:replace("x-spatial-cluster", cluster)
end

-- Every answer says which decision produced it, so a client can compare it with
-- explain-route: the reason and the data version (also on 200s).
function envoy_on_response(handle)
  local md = handle:streamInfo():dynamicMetadata():get("spatial")
  if md and md.version then
    local headers = handle:headers()
    headers:replace("x-spatial-reason", md.reason or "")
    headers:replace("x-spatial-version", md.version)
  end
end
