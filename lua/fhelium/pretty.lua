-- Pretty printing: tensors like Torch7 (values, then a footer with dtype,
-- size, strides and device; large tensors abbreviated with "..."), and any
-- Lua value for the REPL (nested tables, cycles, userdata via __tostring).
local ffi = require "ffi"
local M = {}

M.edge = 3        -- elements kept at each end of an abbreviated dimension
M.threshold = 1000 -- tensors with more elements are abbreviated

local function is_int64(v) return type(v) == "cdata" end

-- A formatter shared by all printed elements so columns line up.
local function make_formatter(values, dtype)
  if dtype == "bool" then
    return function(v) return v and "true" or "false" end, 5
  end
  if dtype == "int64" or dtype == "uint64" then
    local w = 1
    for _, v in ipairs(values) do
      local s = tostring(v):gsub("U?LL$", "")
      if #s > w then w = #s end
    end
    return function(v) return (tostring(v):gsub("U?LL$", "")) end, w
  end
  local complex = dtype == "complex128"
  local all_int, maxabs, minabs = true, 0, math.huge
  local function scan(x)
    if x ~= x or x == math.huge or x == -math.huge then all_int = false return end
    if x ~= math.floor(x) then all_int = false end
    local a = math.abs(x)
    if a > maxabs then maxabs = a end
    if a > 0 and a < minabs then minabs = a end
  end
  for _, v in ipairs(values) do
    if complex then scan(v[1]) scan(v[2]) else scan(v) end
  end
  local spec
  if all_int and maxabs < 1e15 then
    spec = "%d"
  elseif maxabs >= 1e5 or (minabs < 1e-4 and minabs ~= math.huge) then
    spec = "%.4e"
  else
    spec = "%.4f"
  end
  -- NaN and infinities spelled the same whatever the format (C prints -nan
  -- for a NaN with the sign bit set)
  local function f(x)
    if x ~= x then return "nan" end
    if x == math.huge then return "inf" end
    if x == -math.huge then return "-inf" end
    return string.format(spec, x)
  end
  local fmt = f
  if complex then
    fmt = function(v)
      local im = f(math.abs(v[2]))
      return f(v[1]) .. (v[2] < 0 and "-" or "+") .. im .. "i"
    end
  end
  local w = 1
  for _, v in ipairs(values) do
    local s = fmt(v)
    if #s > w then w = #s end
  end
  return fmt, w
end

-- integers as integers (tostring gives 1.1258999068426e+15 for 2^50)
local function ints(list, sep)
  local t = {}
  for i, n in ipairs(list) do t[i] = string.format("%d", n) end
  return table.concat(t, sep)
end

local function size_str(shape)
  if #shape == 0 then return "scalar" end
  return ints(shape, "x")
end

-- indices kept along a dimension of size n (nil marks the gap)
local function kept(n, abbreviate)
  local r = {}
  if abbreviate and n > 2 * M.edge then
    for i = 1, M.edge do r[#r + 1] = i end
    r[#r + 1] = false
    for i = n - M.edge + 1, n do r[#r + 1] = i end
  else
    for i = 1, n do r[i] = i end
  end
  return r
end

function M.tensor(t)
  local shape, dtype = t.shape, t.dtype
  local footer = ("[fhelium.Tensor %s of size %s%s on %s]"):format(dtype, size_str(shape),
    #shape > 0 and (" (strides " .. ints(t:stride(), ",") .. ")") or "", t.device)
  local ok, err = pcall(function() return t:numel() end)
  if not ok then return footer end
  local numel = t:numel()
  if numel == 0 then return "[empty tensor]\n" .. footer end
  local abbreviate = numel > M.threshold
  -- Read only what is shown: an abbreviated tensor is first reduced, on its
  -- own device, to the kept edges of every long dimension (the largest
  -- dimension first, so each copy is smaller than the last), then read.
  local shown_pos = {} -- shown_pos[d][i]: position of index i of dim d in the reduced tensor
  local readok, list = pcall(function()
    local r = t
    for d = 1, #shape do shown_pos[d] = setmetatable({}, { __index = function(_, i) return i end }) end
    if abbreviate then
      local order = {}
      for d = 1, #shape do
        if shape[d] > 2 * M.edge then order[#order + 1] = d end
      end
      table.sort(order, function(x, y) return shape[x] > shape[y] end)
      for _, d in ipairs(order) do
        local n, e = shape[d], M.edge
        local rshape = r.shape
        rshape[d] = 2 * e
        local g = require("fhelium.core").empty(rshape, { dtype = dtype, device = t.device })
        g:narrow(d, 1, e):copy_(r:narrow(d, 1, e))
        g:narrow(d, e + 1, e):copy_(r:narrow(d, n - e + 1, e))
        r = g
        shown_pos[d] = setmetatable({}, { __index = function(_, i) return i <= e and i or i - (n - 2 * e) end })
      end
    end
    return { r:tolist() }
  end)
  if not readok then return ("[data not readable: %s]\n%s"):format(tostring(list), footer) end
  local nested = list[1]
  local function getter(idx)
    local v = nested
    for d = 1, #idx do v = v[shown_pos[d][idx[d]]] end
    return v
  end
  -- collect displayed values for the formatter
  local values = {}
  local function walk(d, idx)
    if d > #shape then values[#values + 1] = getter(idx) return end
    for _, i in ipairs(kept(shape[d], abbreviate)) do
      if i then idx[d] = i walk(d + 1, idx) idx[d] = nil end
    end
  end
  local gok, gerr = pcall(walk, 1, {})
  if not gok then return ("[data not readable: %s]\n%s"):format(tostring(gerr), footer) end
  local fmt, width = make_formatter(values, dtype)
  local function cell(v) local s = fmt(v) return string.rep(" ", width - #s) .. s end
  local out = {}
  if #shape == 0 then
    out[1] = fmt(getter({}))
  elseif #shape == 1 then
    for _, i in ipairs(kept(shape[1], abbreviate)) do
      -- one element per line with a leading space, as Torch7 prints vectors
      out[#out + 1] = " " .. (i and cell(getter({ i })) or string.rep(" ", width - 3) .. "...")
    end
  else
    local function matrix(prefix)
      local rows = {}
      local nr, nc = shape[#shape - 1], shape[#shape]
      for _, r in ipairs(kept(nr, abbreviate)) do
        if not r then rows[#rows + 1] = " ..." else
          local cells = {}
          for _, c in ipairs(kept(nc, abbreviate)) do
            if c then
              local idx = {}
              for k = 1, #prefix do idx[k] = prefix[k] end
              idx[#idx + 1] = r
              idx[#idx + 1] = c
              cells[#cells + 1] = cell(getter(idx))
            else
              cells[#cells + 1] = "..."
            end
          end
          rows[#rows + 1] = " " .. table.concat(cells, " ")
        end
      end
      return table.concat(rows, "\n")
    end
    local function slices(d, prefix)
      if d > #shape - 2 then
        if #prefix > 0 then
          local head = {}
          for k = 1, #prefix do head[k] = tostring(prefix[k]) end
          out[#out + 1] = "(" .. table.concat(head, ",") .. ",.,.) = "
        end
        out[#out + 1] = matrix(prefix)
        if #prefix > 0 then out[#out + 1] = "" end
        return
      end
      for _, i in ipairs(kept(shape[d], abbreviate)) do
        if i then
          prefix[#prefix + 1] = i
          slices(d + 1, prefix)
          prefix[#prefix] = nil
        else
          out[#out + 1] = "..."
          out[#out + 1] = ""
        end
      end
    end
    slices(1, {})
  end
  out[#out + 1] = footer
  return table.concat(out, "\n")
end

-- Any Lua value, for the REPL: nested tables indented, cycles marked.
local function is_identifier(s)
  return type(s) == "string" and s:match("^[%a_][%w_]*$") ~= nil
end

function M.value(v, opts)
  opts = opts or {}
  local maxdepth = opts.depth or 4
  local seen = {}
  local function fmt(x, depth, indent)
    local tx = type(x)
    if tx == "string" then return string.format("%q", x) end
    if tx ~= "table" then
      local mt = getmetatable(x)
      if tx == "userdata" or tx == "cdata" or (mt and mt.__tostring) then return tostring(x) end
      return tostring(x)
    end
    local mt = getmetatable(x)
    if mt and mt.__tostring then return tostring(x) end
    if seen[x] then return "<cycle>" end
    if depth >= maxdepth then return "{...}" end
    seen[x] = true
    local n = #x
    local parts, keys = {}, {}
    for i = 1, n do parts[#parts + 1] = fmt(x[i], depth + 1, indent .. "  ") end
    for k in pairs(x) do
      if not (type(k) == "number" and k >= 1 and k <= n and k == math.floor(k)) then keys[#keys + 1] = k end
    end
    table.sort(keys, function(a, b)
      local ta, tb = type(a), type(b)
      if ta ~= tb then return ta < tb end
      if ta == "string" or ta == "number" then return a < b end
      return tostring(a) < tostring(b)
    end)
    for _, k in ipairs(keys) do
      local ks = is_identifier(k) and k or ("[" .. fmt(k, depth + 1, indent) .. "]")
      parts[#parts + 1] = ks .. " = " .. fmt(x[k], depth + 1, indent .. "  ")
    end
    seen[x] = nil
    if #parts == 0 then return "{}" end
    local one = "{" .. table.concat(parts, ", ") .. "}"
    if #one <= 72 and not one:find("\n") then return one end
    return "{\n" .. indent .. "  " .. table.concat(parts, ",\n" .. indent .. "  ") .. "\n" .. indent .. "}"
  end
  return fmt(v, 0, "")
end

return M
