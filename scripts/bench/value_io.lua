-- Value files with many entries: loading N one-byte tensors, from a plain
-- safetensors file and from a file fh.save wrote (a list of N tensors).
--
--   scripts/run scripts/bench/value_io.lua [--n 100000] [--runs 3]
--
-- Each load runs --runs times on a file written once (in the OS cache);
-- the lines show the median wall time, the target and whether it is met,
-- then how the time grows from N/4 to N entries (4x for linear work, about
-- 4.5x for n log n, 16x for quadratic). Saving is reported, without a target.
local fh = require "fhelium"
local lib = dofile((arg[0]:match("^(.*)/") or ".") .. "/lib.lua")
local now = lib.now

local opts = { n = "100000", runs = "3" }
local i = 1
while arg and i <= #arg do
  local k = arg[i]:match("^%-%-(.+)$")
  if not k or opts[k] == nil or not tonumber(arg[i + 1]) then
    io.stderr:write("usage: value_io.lua [--n entries] [--runs count]\n")
    os.exit(2)
  end
  opts[k] = arg[i + 1]
  i = i + 2
end
local N, runs = math.floor(tonumber(opts.n)), math.floor(tonumber(opts.runs))

local dir = os.tmpname()
os.remove(dir)
assert(os.execute("mkdir -p '" .. dir .. "'") == 0)

local function le64(x)
  local s = {}
  for k = 0, 7 do s[#s + 1] = string.char(math.floor(x / 2 ^ (8 * k)) % 256) end
  return table.concat(s)
end

-- n one-byte U8 entries named in descending order (the worst case of an
-- insertion sort), as another tool would write them
local function write_plain(path, n)
  local parts, data = { "{" }, {}
  for k = n, 1, -1 do
    local off = n - k
    parts[#parts + 1] = ('"t%07d":{"dtype":"U8","shape":[1],"data_offsets":[%d,%d]}%s'):format(k, off, off + 1,
      k > 1 and "," or "")
    data[#data + 1] = string.char(k % 256)
  end
  parts[#parts + 1] = "}"
  local h = table.concat(parts)
  local f = assert(io.open(path, "wb"))
  f:write(le64(#h), h, table.concat(data))
  f:close()
end

local function write_fhelium(path, n)
  local l = {}
  for k = 1, n do l[k] = fh.full({ 1 }, k % 256, { dtype = "uint8" }) end
  collectgarbage()
  local t0 = now()
  fh.save(l, path, { overwrite = true })
  return now() - t0
end

local function median_load(path, n, count)
  local t = {}
  for r = 1, count do
    collectgarbage()
    collectgarbage()
    local t0 = now()
    local v = fh.load(path)
    t[r] = now() - t0
    local len = 0
    for _ in pairs(v) do len = len + 1 end
    assert(len == n, "loaded " .. len .. " entries, expected " .. n)
  end
  return lib.median(t)
end

local plain, saved = dir .. "/plain.safetensors", dir .. "/saved.safetensors"
local function line(what, secs, target)
  if target then
    print(("%-60s %7.3f s   target < %g s: %s"):format(what, secs, target, secs < target and "yes" or "no"))
  else
    print(("%-60s %7.3f s   reported"):format(what, secs))
  end
end

print(("fhelium %s, %d entries, median of %d loads"):format(fh._VERSION, N, runs))
write_plain(plain, N)
local tp = median_load(plain, N, runs)
line(("load %d entries, plain safetensors file"):format(N), tp, 1)
local ts = write_fhelium(saved, N)
local tf = median_load(saved, N, runs)
line(("load %d entries, fhelium file (a list of %d tensors)"):format(N, N), tf, 1)
line(("save %d tensors (a list)"):format(N), ts)
-- growth from N/4 to N
local q = math.floor(N / 4)
write_plain(plain, q)
local tq = median_load(plain, q, runs)
write_fhelium(saved, q)
local tfq = median_load(saved, q, runs)
print(("growth %d -> %d entries: plain x%.1f, fhelium x%.1f (linear x4, n log n ~x4.5, quadratic x16)"):format(q, N,
  tp / tq, tf / tfq))
os.execute("rm -rf '" .. dir .. "'")
