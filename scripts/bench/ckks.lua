-- CKKS per-operation latency at 8192 and 16384 slots, printed as a table.
--
--   scripts/run scripts/bench/ckks.lua [--device cpu|cuda] [--slots 8192,16384] [--min-time 0.5]
--
-- Each operation runs once to warm up (tables, caches), then repeats until
-- --min-time seconds (at least 3 times); the table shows the median wall time
-- per call in milliseconds. Inputs are fresh encryptions of random messages
-- at level 0 (rescale: a 2-component product at level 0). On the CPU these
-- are single-threaded figures; GPU figures come with the CUDA kernels.
local fh = require "fhelium"
local lib = dofile((arg[0]:match("^(.*)/") or ".") .. "/lib.lua")
local now = lib.now

local opts = { device = "cpu", slots = "8192,16384", ["min-time"] = "0.5" }
local i = 1
while arg and i <= #arg do
  local k = arg[i]:match("^%-%-(.+)$")
  if not k or opts[k] == nil or arg[i + 1] == nil then
    io.stderr:write("usage: ckks.lua [--device cpu|cuda] [--slots 8192,16384] [--min-time seconds]\n")
    os.exit(2)
  end
  opts[k] = arg[i + 1]
  i = i + 2
end
local min_time = tonumber(opts["min-time"])

local presets = {
  [8192] = fh.Preset.slots8192_scale40_levels7_int64,
  [16384] = fh.Preset.slots16384_scale40_levels16_int64,
  [32768] = fh.Preset.slots32768_scale40_levels34_int64,
  [65536] = fh.Preset.slots65536_scale40_levels72_int64,
}

local function sync()
  if opts.device ~= "cpu" then fh.cuda.synchronize() end
end

local function measure(fn)
  fn()
  sync()
  local times = {}
  local start = now()
  repeat
    local t0 = now()
    fn()
    sync()
    times[#times + 1] = now() - t0
  until #times >= 3 and now() - start >= min_time
  table.sort(times)
  return times[math.floor((#times + 1) / 2)] * 1e3, #times
end

local ops = { "encode", "encrypt", "add", "multiply", "relinearize", "rescale", "rotate", "ntt", "intt", "decrypt" }
local results = {}
local columns = {}
for s in opts.slots:gmatch("%d+") do
  local slots = tonumber(s)
  local preset = presets[slots]
  if not preset then error("no scale-40 preset with " .. slots .. " slots") end
  columns[#columns + 1] = slots
  local e = fh.CkksEngine(preset, { device = opts.device, seed = 1 })
  local sk = e:create_secret_key()
  local pk = e:create_public_key(sk)
  local rlk = e:create_relinearization_key(sk)
  e:create_rotation_key(sk, 1)
  local g = fh.Generator(1)
  local x = fh.randn({ slots }, { generator = g, dtype = "float64" }) * 0.01
  local pt = e:encode(x)
  local ct = e:encrypt(pt, pk)
  local cn = e:coefficient_domain_to_ntt_domain(ct)
  local prod = e:multiply(cn, cn)
  local rel = e:relinearize(prod, rlk)
  local r = {}
  r.encode = { measure(function() return e:encode(x) end) }
  r.encrypt = { measure(function() return e:encrypt(pt, pk) end) }
  r.add = { measure(function() return e:add(cn, cn) end) }
  r.multiply = { measure(function() return e:multiply(cn, cn) end) }
  r.relinearize = { measure(function() return e:relinearize(prod, rlk) end) }
  r.rescale = { measure(function() return e:rescale_to_next_level(rel) end) }
  r.rotate = { measure(function() return e:rotate_by_step(cn, 1) end) }
  r.ntt = { measure(function() return e:coefficient_domain_to_ntt_domain(ct) end) }
  r.intt = { measure(function() return e:ntt_domain_to_coefficient_domain(cn) end) }
  r.decrypt = { measure(function() return e:decrypt_message(cn, sk, { is_real = true }) end) }
  local err = fh.max_abs_diff(e:decrypt_message(e:rescale_to_next_level(rel), sk, { is_real = true }), x * x)
  r.check = err
  r.limbs = #e.context.q_primes
  r.dnum = e.dnum
  results[slots] = r
end

local info = fh.info()
print(("fhelium %s, CKKS CPU kernels, device %s, build %s"):format(info.version, opts.device, info.build_type or "?"))
local head = ("%-14s"):format("operation")
for _, s in ipairs(columns) do head = head .. ("%18s"):format(("slots %d (ms)"):format(s)) end
print(head)
print(("-"):rep(#head))
for _, op in ipairs(ops) do
  local line = ("%-14s"):format(op)
  for _, s in ipairs(columns) do line = line .. ("%18.3f"):format(results[s][op][1]) end
  print(line)
end
print(("-"):rep(#head))
local foot = ("%-14s"):format("Q limbs/dnum")
for _, s in ipairs(columns) do foot = foot .. ("%18s"):format(("%d / %d"):format(results[s].limbs, results[s].dnum)) end
print(foot)
local chk = ("%-14s"):format("x*x max error")
for _, s in ipairs(columns) do chk = chk .. ("%18.2e"):format(results[s].check) end
print(chk)
print("ntt/intt: a level-0 ciphertext (2 components x all Q limbs); add/multiply/rotate on NTT-domain inputs;")
print("relinearize: 3 -> 2 components at level 0; rescale: one level; decrypt: decrypt + decode to float64.")
