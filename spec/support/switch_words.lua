-- The key switch's operations under whatever kernel switches the environment sets (each is read
-- once per process, hence a process per setting), at 8192 and 16384 slots (N = 2^14: the split
-- key switch, single-row digits; 2^15: ks2, multi-row digits) with one seed: relinearize plain
-- and with the rescale, multiply fused with relinearize (and the rescale), a rotation,
-- rotate_many and a linear transform plain and with the rescale.
--   switch_words.lua DEVICE            (spec/ckks_cuda_switches_spec.lua) on DEVICE (default
--                                      cuda:0) and on the CPU, word for word; prints
--                                      "switch words: ok" last, or fails naming the operation
--   switch_words.lua DEVICE --save P   (spec/ckks_fold_spec.lua) on DEVICE only, the results
--                                      saved to the file P (fh.save); prints
--                                      "switch words: saved" last
local fh = require "fhelium"
local device = arg[1] or "cuda:0"
local save = arg[2] == "--save" and arg[3] or nil
local presets = { fh.Preset.slots8192_scale40_levels7_int64, fh.Preset.slots16384_scale40_levels16_int64 }
local saved = {}
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
    k.pts = {}
    for i = 1, 3 do
      local d = (fh.rand({ n }, { dtype = "float64", generator = g }) - 0.5):to(dev)
      k.pts[i] = e:prepare_plaintext_for_multiplication(e:encode(d, { basis = "QP" }))
    end
    return k
  end
  local function ops(k)
    local e = k.e
    local m = e:multiply(k.a, k.b)
    local r = {
      relinearize = e:relinearize(m, k.rlk),
      relinearize_rescale = e:relinearize(m, k.rlk, { rescale = true }),
      multiply_relinearize = e:multiply(k.a, k.b, { relinearize = k.rlk }),
      multiply_relinearize_rescale = e:multiply(k.a, k.b, { relinearize = k.rlk, rescale = true }),
      rotate = e:rotate_by_step(k.a, 1),
      linear_transform = e:linear_transform(k.a, { 0, 1, 3 }, k.pts),
      linear_transform_rescale = e:linear_transform(k.a, { 0, 1, 3 }, k.pts, { rescale = true }),
    }
    for i, x in ipairs(e:rotate_many(k.a, { 1, 2, 3 })) do r["rotate_many " .. i] = x end
    return r
  end
  if save then
    local d = build(device)
    saved["slots" .. d.e.context.num_slots] = ops(d)
  else
    local c, d = build("cpu"), build(device)
    local rc, rd = ops(c), ops(d)
    for name, x in pairs(rc) do
      if not fh.equal(x.data, rd[name].data:cpu()) then
        error(("%d slots: %s: the %s words differ from the CPU's"):format(c.e.context.num_slots, name, device))
      end
    end
  end
end
if save then
  fh.save(saved, save, { overwrite = true })
  print("switch words: saved")
else
  print("switch words: ok")
end
