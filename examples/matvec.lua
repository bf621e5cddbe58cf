-- examples/matvec.lua: the encrypted matrix-vector product by cyclic
-- diagonals (FHElium's example 11), shared by examples/matrix_vector.lua,
-- examples/encrypted_pipeline.lua and scripts/bench/pipeline.lua. Not a
-- module on package.path: a script loads it relative to itself,
--   local matvec = dofile((arg[0]:match("^(.*)/") or ".") .. "/matvec.lua")
--
-- y = M v for a public size x size matrix M and an encrypted vector v:
--   y[j] = sum_i d_i[j] * v[(j + i) mod size],   d_i[j] = M[j][(j + i) mod size]
-- The vector is encrypted as [v, v, 0, ...] so that a left rotation by i
-- (rotate_by_step(ct, -i): slot j <- slot j + i) wraps modulo `size` in the
-- first `size` slots; each diagonal is a prepared plaintext. One program
-- run is `size - 1` hoisted rotations, `size` plaintext products, `size - 1` additions
-- and one rescale.
local fh = require "fhelium"

local M = {}

--- n uniform values in [-1, 1) from generator `gen`.
function M.uniform(gen, n)
  return (fh.rand({ n }, { generator = gen, dtype = "float64" }) * 2 - 1):tolist()
end

--- A random size x size matrix (rows of uniform values).
function M.matrix(gen, size)
  local m = {}
  for j = 1, size do m[j] = M.uniform(gen, size) end
  return m
end

--- The rotation keys the program needs, made by `engine` from `sk` (a
--- secret key of the same context, on any device).
function M.create_keys(engine, sk, size)
  local sk_here = sk.device == engine.device and sk or sk:to(engine.device)
  for i = 1, size - 1 do engine:create_rotation_key(sk_here, -i) end
end

--- program(ct_v) -> ct_y on `engine`: one dynamic input (the encrypted
--- vector), the diagonals and the engine bound by closure, so the execution
--- layer can capture it and replay it with new inputs.
function M.program(engine, matrix, size)
  local diagonals = {}
  for i = 0, size - 1 do
    local d = {}
    for j = 0, size - 1 do d[j + 1] = matrix[j + 1][(j + i) % size + 1] end
    -- a float64 tensor, not a table: a table of two numbers would read as one complex {re, im}
    diagonals[i] = engine:prepare_plaintext_for_multiplication(engine:encode(fh.tensor(d, { dtype = "float64" })))
  end
  -- the size - 1 rotations of ct_v are hoisted (rotate_many: one mod-up of
  -- the key switch shared by every step; the same words as rotate_by_step each)
  local steps = {}
  for i = 1, size - 1 do steps[i] = -i end
  return function(ct_v)
    local rotated = size > 1 and engine:rotate_many(ct_v, steps) or {}
    local acc
    for i = 0, size - 1 do
      local term = engine:multiply_plaintext(i == 0 and ct_v or rotated[i], diagonals[i])
      acc = acc and engine:add(acc, term) or term
    end
    return engine:rescale_to_next_level(acc)
  end
end

--- The NTT-domain encryption of [v, v, 0, ...] by `engine` with `pk`.
function M.encrypt_vector(engine, pk, v, size)
  local slots_v = {}
  for j = 1, size do
    slots_v[j] = v[j]
    slots_v[size + j] = v[j]
  end
  return engine:coefficient_domain_to_ntt_domain(engine:encrypt_message(slots_v, pk))
end

--- The plaintext product M v.
function M.reference(matrix, v, size)
  local y = {}
  for j = 1, size do
    local s = 0
    for k = 1, size do s = s + matrix[j][k] * v[k] end
    y[j] = s
  end
  return y
end

--- max_j |decrypt(ct)[j] - want[j]| over the first `size` slots (`engine`
--- and `sk` on the ciphertext's device).
function M.max_error(engine, sk, ct, want, size)
  local got = engine:decrypt_message(ct, sk, { is_real = true }):cpu():tolist()
  local err = 0
  for j = 1, size do err = math.max(err, math.abs(got[j] - want[j])) end
  return err
end

return M
