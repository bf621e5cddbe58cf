-- spec/ckks_cuda_switches_spec.lua's child: the key switch's operations on a device (argument 1,
-- default cuda:0) and on the CPU with one seed, word for word, at 8192 and 16384 slots (N = 2^14:
-- the split key switch, single-row digits; 2^15: ks2, multi-row digits), under whatever kernel
-- switches the environment sets (each is read once per process, hence a process per setting).
-- Prints "switch words: ok" last, or fails naming the operation.
local fh = require "fhelium"
local device = arg[1] or "cuda:0"
local presets = { fh.Preset.slots8192_scale40_levels7_int64, fh.Preset.slots16384_scale40_levels16_int64 }
for _, preset in ipairs(presets) do
  local function build(dev)
    local e = fh.CkksEngine(preset, { device = dev, seed = 7 })
    local sk = e:create_secret_key()
    local pk = e:create_public_key(sk)
    local k = { e = e, rlk = e:create_relinearization_key(sk) }
    for _, r in ipairs { 1, 2, 3 } do e:create_rotation_key(sk, r) end
    local n = e.context.num_slots
    local g = fh.Generator(11)
    local function ct()
      local m = (fh.rand({ n }, { dtype = "float64", generator = g }) - 0.5):to(dev)
      return e:coefficient_domain_to_ntt_domain(e:encrypt_message(m, pk))
    end
    k.a, k.b = ct(), ct()
    return k
  end
  local c, d = build("cpu"), build(device)
  local function ops(k)
    local e = k.e
    local m = e:multiply(k.a, k.b)
    local r = {
      relinearize = e:relinearize(m, k.rlk),
      relinearize_rescale = e:relinearize(m, k.rlk, { rescale = true }),
      multiply_relinearize_rescale = e:multiply(k.a, k.b, { relinearize = k.rlk, rescale = true }),
      rotate = e:rotate_by_step(k.a, 1),
    }
    for i, x in ipairs(e:rotate_many(k.a, { 1, 2, 3 })) do r["rotate_many " .. i] = x end
    return r
  end
  local rc, rd = ops(c), ops(d)
  for name, x in pairs(rc) do
    if not fh.equal(x.data, rd[name].data:cpu()) then
      error(("%d slots: %s: the %s words differ from the CPU's"):format(c.e.context.num_slots, name, device))
    end
  end
end
print("switch words: ok")
