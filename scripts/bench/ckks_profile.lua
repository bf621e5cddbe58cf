-- CKKS operations for a profiler: set up an engine, keys and inputs, then run
-- the chosen operations `--reps` times inside a profiler range
-- (fh.cuda._profiler), so that
--
--   ncu --profile-from-start off --print-summary per-kernel \
--     luajit scripts/bench/ckks_profile.lua --slots 8192 --ops relinearize,rescale
--
-- reports exactly their kernels (names, durations, bandwidth). Prints the ops and
-- the kernel launches each made. Needs a CUDA device.
local fh = require "fhelium"
local lib = dofile((arg[0]:match("^(.*)/") or ".") .. "/lib.lua")

local opts = { slots = "8192", ops = "ntt,multiply,relinearize,rescale,rotate", reps = "1", matvec = "8",
  form = "linear_transform" }
local i = 1
while arg and i <= #arg do
  local k = arg[i]:match("^%-%-(.+)$")
  if not k or opts[k] == nil or arg[i + 1] == nil then
    io.stderr:write("usage: ckks_profile.lua [--slots 8192] [--ops ntt,relinearize,...] [--reps 1] [--matvec 8] "
      .. "[--form linear_transform|rotate_many]\n")
    os.exit(2)
  end
  opts[k] = arg[i + 1]
  i = i + 2
end
lib.require_cuda(fh)
local presets = {
  ["8192"] = fh.Preset.slots8192_scale40_levels7_int64,
  ["16384"] = fh.Preset.slots16384_scale40_levels16_int64,
  ["32768"] = fh.Preset.slots32768_scale40_levels34_int64,
  ["65536"] = fh.Preset.slots65536_scale40_levels72_int64,
}
local e = fh.CkksEngine(assert(presets[opts.slots], "unknown --slots"), { device = "cuda:0", seed = 1 })
local sk = e:create_secret_key()
local pk = e:create_public_key(sk)
local rlk = e:create_relinearization_key(sk)
local rk = e:create_rotation_key(sk, 1)
local eight = {}
for i = 1, 8 do
  eight[i] = i
  if i > 1 then e:create_rotation_key(sk, i) end
end
local x = (fh.randn({ e.context.num_slots }, { generator = fh.Generator(1), dtype = "float64" }) * 0.01):cuda()
local ct = e:encrypt(e:encode(x), pk)
local cn = e:coefficient_domain_to_ntt_domain(ct)
local prod = e:multiply(cn, cn)
local rel = e:relinearize(prod, rlk)
local relc = e:ntt_domain_to_coefficient_domain(rel)
local ppt = e:prepare_plaintext_for_multiplication(e:encode(x))
local ops = {
  ntt = function() return e:coefficient_domain_to_ntt_domain(ct) end,
  intt = function() return e:ntt_domain_to_coefficient_domain(cn) end,
  add = function() return e:add(cn, cn) end,
  multiply = function() return e:multiply(cn, cn) end,
  multiply_plaintext = function() return e:multiply_plaintext(cn, ppt) end,
  relinearize = function() return e:relinearize(prod, rlk) end,
  rescale = function() return e:rescale_to_next_level(rel) end,
  rescale_coef = function() return e:rescale_to_next_level(relc) end,
  mul_relin_rescale = function() return e:rescale_to_next_level(e:relinearize(e:multiply(cn, cn), rlk)) end,
  mul_relin_rescale_fused = function() return e:relinearize(e:multiply(cn, cn), rlk, { rescale = true }) end,
  mul_relin_rescale_1 = function() return e:multiply(cn, cn, { relinearize = rlk, rescale = true }) end,
  rotate = function() return e:rotate_with_key(cn, rk) end,
  rotate_8_hoisted = function() return e:rotate_many(cn, eight) end,
  encode = function() return e:encode(x) end,
  decrypt = function() return e:decrypt_message(cn, sk, { is_real = true }) end,
}
-- the main job's program (examples/matvec.lua) at size opts.matvec in form opts.form, as ops["matvec"]
if opts.ops:find("matvec", 1, true) then
  local matvec = dofile((arg[0]:match("^(.*)/") or ".") .. "/../../examples/matvec.lua")
  local size = tonumber(opts.matvec)
  local g = fh.Generator(2)
  matvec.create_keys(e, sk, size)
  local program = matvec.program(e, matvec.matrix(g, size), size, { form = opts.form })
  local v = matvec.encrypt_vector(e, pk, matvec.uniform(g, size), size)
  ops.matvec = function() return program(v) end
end
local reps = tonumber(opts.reps)
for name in opts.ops:gmatch("[%w_]+") do
  local fn = assert(ops[name], "unknown op " .. name)
  fn() -- warm (allocator, tables)
  fh.cuda.synchronize()
  local before = fh.core.info().launches
  fh.cuda._profiler(true)
  for _ = 1, reps do fn() end
  fh.cuda.synchronize()
  fh.cuda._profiler(false)
  print(("%s: %d launch(es) per call"):format(name, (fh.core.info().launches - before) / reps))
end
