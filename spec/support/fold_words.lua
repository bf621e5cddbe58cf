-- spec/ckks_fold_spec.lua's child: the operations whose key switch takes its sources from an
-- INTT (relinearize plain and with the rescale, multiply fused with relinearize and rescale, a
-- rotation, hoisted rotations, a linear transform plain and with the rescale) on a device (argument 2,
-- default cpu) at 8192 and 16384 slots with one seed, saved to the file argument 1 names
-- (fh.save). FHELIUM_CUDA_FOLD, read when a context's tables are built, is the parent's to set:
-- the words must not depend on it. Prints "fold words: saved" last.
local fh = require "fhelium"
local path, device = arg[1], arg[2] or "cpu"
local out = {}
for _, preset in ipairs { fh.Preset.slots8192_scale40_levels7_int64, fh.Preset.slots16384_scale40_levels16_int64 } do
  local e = fh.CkksEngine(preset, { device = device, seed = 5 })
  local sk = e:create_secret_key()
  local pk = e:create_public_key(sk)
  local rlk = e:create_relinearization_key(sk)
  for _, r in ipairs { 1, 2, 3 } do e:create_rotation_key(sk, r) end
  local n = e.context.num_slots
  local g = fh.Generator(13)
  local function ct()
    local m = (fh.rand({ n }, { dtype = "float64", generator = g }) - 0.5):to(device)
    return e:coefficient_domain_to_ntt_domain(e:encrypt_message(m, pk))
  end
  local a, b = ct(), ct()
  local m = e:multiply(a, b)
  local r = {
    relinearize = e:relinearize(m, rlk),
    relinearize_rescale = e:relinearize(m, rlk, { rescale = true }),
    multiply_relinearize_rescale = e:multiply(a, b, { relinearize = rlk, rescale = true }),
    multiply_relinearize = e:multiply(a, b, { relinearize = rlk }),
    rotate = e:rotate_by_step(a, 1),
    rotate_many = e:rotate_many(a, { 1, 2, 3 }),
  }
  -- a linear transform (the hoisted mod-downs of its sum, plain and with the rescale)
  local pts = {}
  for i = 1, 3 do
    local d = (fh.rand({ n }, { dtype = "float64", generator = g }) - 0.5):to(device)
    pts[i] = e:prepare_plaintext_for_multiplication(e:encode(d, { basis = "QP" }))
  end
  r.linear_transform = e:linear_transform(a, { 0, 1, 3 }, pts)
  r.linear_transform_rescale = e:linear_transform(a, { 0, 1, 3 }, pts, { rescale = true })
  out["slots" .. n] = r
end
fh.save(out, path, { overwrite = true })
print("fold words: saved")
