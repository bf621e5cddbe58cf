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
-- run is one linear transform with its rescale (engine:linear_transform with
-- rescale = true: the `size - 1` rotations, `size` plaintext products and
-- their sum with one mod-up and one mod-down that also rescales, docs/ckks.md
-- "Linear transforms"); the form
-- "rotate_many" runs `size - 1` hoisted rotations, `size` plaintext products,
-- `size - 1` additions and one rescale instead.
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
--- layer can capture it and replay it with new inputs. opts.form:
--- "linear_transform" (default: one engine:linear_transform of plaintexts
--- over QP) or "rotate_many" (hoisted rotations, then products and sums);
--- opts.level: the level of the vectors it takes (default 0; the diagonals
--- are encoded there).
function M.program(engine, matrix, size, opts)
  local form = opts and opts.form or "linear_transform"
  local level = opts and opts.level or 0
  assert(form == "linear_transform" or form == "rotate_many", "matvec.program: form is linear_transform or rotate_many")
  local basis = form == "linear_transform" and "QP" or "Q"
  local diagonals = {}
  for i = 0, size - 1 do
    local d = {}
    for j = 0, size - 1 do d[j + 1] = matrix[j + 1][(j + i) % size + 1] end
    -- a float64 tensor, not a table: a table of two numbers would read as one complex {re, im}
    diagonals[i] = engine:prepare_plaintext_for_multiplication(engine:encode(fh.tensor(d, { dtype = "float64" }),
      { basis = basis, level = level }))
  end
  if form == "linear_transform" then
    -- sum_i d_i * rotate(ct_v, -i): every rotation and product over QP, one mod-down
    -- fused with the rescale (the words of rescale_to_next_level(linear_transform(...)))
    local steps, pts = {}, {}
    for i = 0, size - 1 do
      steps[i + 1] = -i
      pts[i + 1] = diagonals[i]
    end
    return function(ct_v) return engine:linear_transform(ct_v, steps, pts, { rescale = true }) end
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

--- The level a request needs: the program consumes one level (its rescale),
--- so a vector encrypted at max_level - 1 is all it reads (at the 8192-slot
--- preset three Q primes: the scale prime the rescale drops and the two that
--- stay). A request at a lower level (more primes) gives the same product
--- with more limbs to move and switch: at level 0 of that preset, 8 Q primes
--- instead of 3, and 6x the rotation-key bytes read per rotation.
function M.request_level(ctx)
  return ctx.max_level - 1
end

--- The NTT-domain encryption of [v, v, 0, ...] by `engine` with `pk`, at
--- `level` (default 0: every Q prime; M.request_level: only what the
--- program needs).
function M.encrypt_vector(engine, pk, v, size, level)
  local slots_v = {}
  for j = 1, size do
    slots_v[j] = v[j]
    slots_v[size + j] = v[j]
  end
  return engine:coefficient_domain_to_ntt_domain(engine:encrypt_message(slots_v, pk, { level = level or 0 }))
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

--- The tolerance of the program's decrypted output, and sigma: 6 standard
--- deviations of the decoded error of one output slot (docs/ckks.md, "Noise
--- and tolerances"), from the fresh encryption noise, the key switching of
--- the size - 1 rotations, the rounding of the size encoded diagonals and of
--- the rescale, given N, the scale and the primes of `ctx`, for an input at
--- `level` (default 0).
-- Variances of the decoded error of one output slot, in message units: a
-- polynomial whose N coefficients have variance V decodes to slots of
-- variance N V / scale^2. Bounds on the data: |M[j][k]| <= 1, |v[k]| <= 1.
function M.error_bound(ctx, size, level)
  level = level or 0
  local nrot, nprod = size - 1, size
  local N, scale, sigma = ctx.ring_degree, ctx.default_scale, 3.2
  local q, p = ctx.q_primes, ctx.p_primes
  -- fresh encryption: u e + e0 + e1 s (u, s ternary: variance 2/3) and the
  -- rounding of the encoded message
  local v_fresh = sigma ^ 2 * (4 * N / 3 + 1) + 1 / 12
  -- one key switch at `level` (hybrid, digits of consecutive Q primes: #P
  -- of them, or as many as stay below P for key_digits "below_p"; at a level
  -- a digit keeps its primes still present, q[level + 1] on): sum over those
  -- digits of alpha_j Q_j^2 / (12 P^2) N sigma^2 (fast base conversion:
  -- alpha_j primes of the digit present), plus the mod-down rounding
  local logP = 0
  for i = 1, #p do logP = logP + math.log(tonumber(p[i])) end
  local ks, ndigits, i = 0, 0, 1
  while i <= #q do
    local logQ, alpha, n, logQ_here = 0, 0, 0, 0
    repeat
      logQ, n = logQ + math.log(tonumber(q[i])), n + 1
      if i > level then logQ_here, alpha = logQ_here + math.log(tonumber(q[i])), alpha + 1 end
      i = i + 1
    until i > #q or (ctx.key_digits == "below_p" and logQ + math.log(tonumber(q[i])) >= logP)
      or (ctx.key_digits ~= "below_p" and n == #p)
    if alpha > 0 then ks = ks + alpha * math.exp(2 * (logQ_here - logP)) / 12 end
    ndigits = ndigits + 1
  end
  assert(ndigits == ctx.num_key_digits, ("error_bound: %d digits, the context has %d"):format(ndigits,
    ctx.num_key_digits))
  local v_ks = ks * N * sigma ^ 2 + (1 + 2 * N / 3) / 12
  -- after the plaintext products the rescale divides by the level's first
  -- prime with rounding
  local scale_out = scale * scale / tonumber(q[level + 1])
  local var_ct = N * (v_fresh + (nrot > 0 and v_ks or 0)) / scale ^ 2 -- a (rotated) input
  local var_pt = N / 12 / scale ^ 2                                    -- an encoded diagonal
  local var_rs = N * (1 + 2 * N / 3) / 12 / scale_out ^ 2              -- the rescale
  local var = nprod * (var_ct + var_pt) + var_rs
  return 6 * math.sqrt(var), math.sqrt(var)
end

return M
