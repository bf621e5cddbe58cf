-- engine:linear_transform(ct, steps, plaintexts [, keys]): sum_i plaintexts[i] *
-- rotate(ct, steps[i]) by double hoisting (docs/ckks.md "Linear transforms"), and
-- the plaintexts over QP it takes (encode {basis = "QP"}).
local fh = require "fhelium"
local ex = require "fhelium.execution"
local H = require "spec.helpers"

local small = { log_n = 10, q_bits = { 40, 40, 40, 60 }, p_bits = { 60, 60 }, scale = 2 ^ 40, allow_insecure = true }

local function setup(device, seed, steps)
  local e = fh.CkksEngine(small, { device = device, seed = seed })
  local sk = e:create_secret_key()
  local pk = e:create_public_key(sk)
  local keys = {}
  for _, r in ipairs(steps) do
    local c = e:create_rotation_key(sk, r)
    keys[r] = c
  end
  return e, sk, pk, keys
end

-- slot j of sum_i d_i * rotate(m, s_i): sum_i d_i[j] * m[j - s_i]
local function want_of(m, diags, steps, S)
  local w = {}
  for j = 1, S do
    local s = 0
    for i, r in ipairs(steps) do s = s + diags[i][j] * m[(j - 1 - r) % S + 1] end
    w[j] = s
  end
  return w
end

local function worst(got, want)
  local w = 0
  for j = 1, #want do w = math.max(w, math.abs(got[j] - want[j])) end
  return w
end

-- random diagonals as prepared QP plaintexts (and the same over Q)
local function diagonals(e, g, n, S, basis)
  local d, pts = {}, {}
  for i = 1, n do
    local t = fh.rand({ S }, { dtype = "float64", generator = g }) - 0.5
    d[i] = t:tolist()
    pts[i] = e:prepare_plaintext_for_multiplication(e:encode(t:to(e.device), { basis = basis }))
  end
  return d, pts
end

local function check(device)
  local seed = H.seed("linear_transform " .. device)
  local steps = { 0, 1, -3, 5, 1, 0, 100 }
  local e, sk, pk = setup(device, seed, { 1, -3, 5, 100 })
  local S = e.context.num_slots
  local g = fh.Generator(seed)
  local m = fh.rand({ S }, { dtype = "float64", generator = g }) - 0.5
  local ct = e:coefficient_domain_to_ntt_domain(e:encrypt_message(m:to(device), pk))
  local d, pts = diagonals(e, g, #steps, S, "QP")
  local _, ptq = diagonals(e, fh.Generator(seed), #steps, S, "Q") -- for the reference path (other values)
  local r = e:linear_transform(ct, steps, pts)
  assert.are.equal(ct.level, r.level)
  assert.are.equal("ntt", r.polynomial_domain)
  assert.are.equal("Q", r.modulus_basis)
  assert.are.equal(device, r.device)
  assert.is_true(math.abs(r.scale - ct.scale * pts[1].scale) <= 1e-9 * r.scale)
  local got = e:decrypt_message(r, sk, { is_real = true }):cpu():tolist()
  local err = worst(got, want_of(m:tolist(), d, steps, S))
  assert.is_true(err < 1e-6, ("decryption error %g"):format(err))
  -- the separate path (rotations, products, sums) decrypts to its own sum as closely
  local rots = e:rotate_many(ct, steps)
  local acc
  for i = 1, #steps do
    local t = e:multiply_plaintext(rots[i], ptq[i])
    acc = acc and e:add(acc, t) or t
  end
  local _, dq = diagonals(e, fh.Generator(seed), #steps, S, "Q")
  local dql = {}
  for i = 1, #steps do
    dql[i] = e:decode(dq[i], { is_real = true }):cpu():tolist()
  end
  local ref = worst(e:decrypt_message(acc, sk, { is_real = true }):cpu():tolist(), want_of(m:tolist(), dql, steps, S))
  assert.is_true(err < 4 * ref + 1e-8, ("linear_transform error %g against the separate path's %g"):format(err, ref))
  return e, sk, pk, ct, steps, pts, r
end

describe("CkksEngine:linear_transform", function()
  it("decrypts to the sum of the plaintexts times the rotations (steps 0, repeated, negative)", function()
    check("cpu")
  end)

  it("takes more steps than one launch holds, explicit keys, a batch and batched plaintexts", function()
    local seed = H.seed("linear_transform many")
    local n = 21 -- two launches of FH_CKKS_LT_STEPS = 16
    local steps, list = {}, {}
    for i = 1, n do
      steps[i] = (i % 5) - 2
      if steps[i] ~= 0 and not list[steps[i]] then list[steps[i]] = true end
    end
    local ks = {}
    for r in pairs(list) do ks[#ks + 1] = r end
    local e, sk, pk, keys = setup("cpu", seed, ks)
    local S = e.context.num_slots
    local g = fh.Generator(seed)
    local m = fh.rand({ 2, S }, { dtype = "float64", generator = g }) - 0.5
    local ct = e:coefficient_domain_to_ntt_domain(e:encrypt_message(m, pk)) -- a batch of 2
    local d, pts = diagonals(e, g, n, S, "QP")
    local r = e:linear_transform(ct, steps, pts)
    local got = e:decrypt_message(r, sk, { is_real = true }):tolist()
    local ml = m:tolist()
    for b = 1, 2 do
      local err = worst(got[b], want_of(ml[b], d, steps, S))
      assert.is_true(err < 1e-5, ("batch entry %d: decryption error %g"):format(b, err))
    end
    -- explicit keys: the same words
    local steps2, pts2, keys2 = { 1, -2, 0 }, { pts[1], pts[2], pts[3] }, { keys[1], keys[-2], false }
    assert.is_true(fh.equal(e:linear_transform(ct, steps2, pts2, keys2).data, e:linear_transform(ct, steps2, pts2).data))
    -- false: the engine's key
    assert.is_true(fh.equal(e:linear_transform(ct, steps2, pts2, { false, keys[-2], false }).data,
      e:linear_transform(ct, steps2, pts2).data))
    -- batched plaintexts: entry b of the batch takes plaintext entry b
    local t1 = fh.rand({ 2, S }, { dtype = "float64", generator = g }) - 0.5
    local pb = e:prepare_plaintext_for_multiplication(e:encode(t1, { basis = "QP" }))
    local rb = e:linear_transform(ct, { 1 }, { pb })
    local gb = e:decrypt_message(rb, sk, { is_real = true }):tolist()
    local tl = t1:tolist()
    for b = 1, 2 do
      local err = worst(gb[b], want_of(ml[b], { tl[b] }, { 1 }, S))
      assert.is_true(err < 1e-5, ("batched plaintexts, entry %d: decryption error %g"):format(b, err))
    end
  end)

  it("replays inside a host program like the eager call", function()
    local e, _, pk, _ = setup("cpu", 7, { 1, -3 })
    local S = e.context.num_slots
    local _, pts = diagonals(e, fh.Generator(3), 3, S, "QP")
    local function fn(ct) return e:linear_transform(ct, { 0, 1, -3 }, pts) end
    local function enc(i)
      return e:coefficient_domain_to_ntt_domain(e:encrypt_message(
        fh.rand({ S }, { dtype = "float64", generator = fh.Generator(i) }), pk))
    end
    local prog = ex.HostGraphProgram.capture(fn, { example_inputs = { enc(1) } })
    for i = 2, 3 do
      local ct = enc(i)
      local out = prog:replay({ ct }, { copy_output = true })
      assert.is_true(fh.equal(out.data, fn(ct).data))
    end
    prog:close()
  end)

  H.gpu_it("gives the CPU engine's words on cuda:0 with the same seed, eager and replayed", function()
    local seed = H.seed("linear_transform cuda")
    -- dnum 2, 8 and 9 (on CUDA, up to 8 digits load a step's words at once, lt_terms_wide; more
    -- take fh_ckks_lt_terms' chunks of four)
    local nine = { log_n = 10, q_bits = { 40, 40, 40, 40, 40, 40, 40, 40, 60 }, p_bits = { 60 }, scale = 2 ^ 40,
      allow_insecure = true }
    for _, what in ipairs { small, fh.Preset.slots8192_scale40_levels7_int64, nine } do
      local res = {}
      for _, device in ipairs { "cpu", "cuda:0" } do
        local e = fh.CkksEngine(what, { device = device, seed = seed })
        if what == nine then assert.equal(9, e.dnum) end
        local sk = e:create_secret_key()
        local pk = e:create_public_key(sk)
        local steps = { 0, 1, -3, 1, 2 }
        for _, r in ipairs { 1, -3, 2 } do e:create_rotation_key(sk, r) end
        local S = e.context.num_slots
        local g = fh.Generator(seed)
        local m = fh.rand({ S }, { dtype = "float64", generator = g }) - 0.5
        local ct = e:coefficient_domain_to_ntt_domain(e:encrypt_message(m:to(device), pk))
        local _, pts = diagonals(e, g, #steps, S, "QP")
        res[device] = e:linear_transform(ct, steps, pts)
        -- 20 steps: two launches (FH_CKKS_LT_STEPS = 16, the second accumulating)
        local steps20, pts20 = {}, {}
        for k = 1, 20 do steps20[k] = steps[(k - 1) % #steps + 1] end
        _, pts20 = diagonals(e, g, #steps20, S, "QP")
        res[device .. " 20"] = e:linear_transform(ct, steps20, pts20)
        if device == "cuda:0" then
          local prog = ex.CudaGraphProgram.capture(function(x) return e:linear_transform(x, steps, pts) end,
            { example_inputs = { ct } })
          local out = prog:replay({ ct }, { copy_output = true, synchronize = true })
          assert.is_true(fh.equal(out.data:cpu(), res[device].data:cpu()), "replay against eager")
          prog:close()
        end
      end
      assert.is_true(fh.equal(res.cpu.data, res["cuda:0"].data:cpu()), "cuda:0 against the CPU")
      assert.is_true(fh.equal(res["cpu 20"].data, res["cuda:0 20"].data:cpu()), "20 steps: cuda:0 against the CPU")
    end
  end)

  it("checks every argument before launching anything", function()
    local e, sk, pk, keys = setup("cpu", 9, { 1, 5 })
    local S = e.context.num_slots
    local ct = e:coefficient_domain_to_ntt_domain(e:encrypt_message(1.0, pk))
    local _, pts = diagonals(e, fh.Generator(1), 3, S, "QP")
    local _, ptq = diagonals(e, fh.Generator(1), 1, S, "Q")
    local coef = e:encrypt_message(1.0, pk)
    local pt_coef = e:encode(0.5, { basis = "QP" })
    local pt_l1 = e:prepare_plaintext_for_multiplication(e:encode(0.5, { basis = "QP", level = 1 }))
    local pt_scale = e:prepare_plaintext_for_multiplication(e:encode(0.5, { basis = "QP", scale = 2 ^ 30 }))
    local pt_batch = e:prepare_plaintext_for_multiplication(e:encode({ { 1 }, { 2 }, { 3 } }, { basis = "QP" }))
    local ct3 = e:multiply(ct, ct)
    local slots_pt = fh.Plaintext { message = fh.full({ S }, 0.5, { dtype = "float64" }), scale = 2 ^ 40 }
    local before = fh.core.info().launches
    local LT = "^CkksEngine:linear_transform: "
    H.expect_error("StateError", { LT .. "polynomial_domain of ct is coefficient, expected ntt" },
      e.linear_transform, e, coef, { 1 }, { pts[1] })
    H.expect_error("StateError", { LT .. "num_components of ct is 3, expected 2" },
      e.linear_transform, e, ct3, { 1 }, { pts[1] })
    H.expect_error("StateError", { LT .. "modulus_basis of plaintexts%[2%] is Q, expected QP %(encode with {basis = \"QP\"}%)" },
      e.linear_transform, e, ct, { 1, 5 }, { pts[1], ptq[1] })
    H.expect_error("StateError", { LT .. "polynomial_domain of plaintexts%[1%] is coefficient, expected ntt" },
      e.linear_transform, e, ct, { 1 }, { pt_coef })
    H.expect_error("StateError", { LT .. "representation of plaintexts%[1%] is slots, expected a prepared rns plaintext over QP" },
      e.linear_transform, e, ct, { 1 }, { slots_pt })
    H.expect_error("StateError", { LT .. "level mismatch: ct is at level 0, plaintexts%[2%] at level 1" },
      e.linear_transform, e, ct, { 1, 5 }, { pts[1], pt_l1 })
    H.expect_error("StateError", { LT .. "scale mismatch: plaintexts%[1%] has scale 1099511627776, plaintexts%[3%] has 1073741824" },
      e.linear_transform, e, ct, { 1, 5, 0 }, { pts[1], pts[2], pt_scale })
    H.expect_error("ValueError", { LT .. "the operands' batch shapes differ" },
      e.linear_transform, e, ct, { 1 }, { pt_batch })
    H.expect_error("StateError", { LT .. "steps%[2%] = 2: the engine has no rotation key for step 2" },
      e.linear_transform, e, ct, { 1, 2 }, { pts[1], pts[2] })
    H.expect_error("StateError", { LT .. "step of keys%[1%] is 5 but steps%[1%] = 1 needs step 1" },
      e.linear_transform, e, ct, { 1 }, { pts[1] }, { keys[5] })
    H.expect_error("TypeError", { LT .. "keys%[1%] expected a RotationKey, got a SecretKey" },
      e.linear_transform, e, ct, { 1 }, { pts[1] }, { sk })
    H.expect_error("TypeError", { LT .. "keys%[1%] expected a RotationKey or false, got boolean" },
      e.linear_transform, e, ct, { 1 }, { pts[1] }, { true })
    H.expect_error("ValueError", { LT .. "argument 4 %(keys%) expected a list of 1 rotation keys" },
      e.linear_transform, e, ct, { 1 }, { pts[1] }, { keys[1], keys[5] })
    H.expect_error("ValueError", { LT .. "argument 3 %(plaintexts%) expected a list of 2 plaintexts %(one per step%), got a list of another length" },
      e.linear_transform, e, ct, { 1, 5 }, { pts[1] })
    H.expect_error("ValueError", { LT .. "argument 3 %(plaintexts%) expected a list of 1 plaintexts %(one per step%), got number" },
      e.linear_transform, e, ct, { 1 }, 3)
    H.expect_error("TypeError", { LT .. "plaintexts%[1%] expected a Plaintext, got number" },
      e.linear_transform, e, ct, { 1 }, { 3 })
    H.expect_error("TypeError", { LT .. "plaintexts%[1%] expected a Plaintext, got a Ciphertext" },
      e.linear_transform, e, ct, { 1 }, { ct })
    H.expect_error("ValueError", { LT .. "steps is empty" }, e.linear_transform, e, ct, {}, {})
    H.expect_error("TypeError", { LT .. "argument 2 %(steps%) expected a list of integers, got number" },
      e.linear_transform, e, ct, 1, { pts[1] })
    H.expect_error("ValueError", { "steps%[1%] must be an integer" }, e.linear_transform, e, ct, { 1.5 }, { pts[1] })
    assert.are.equal(before, fh.core.info().launches, "nothing was launched")
  end)
end)

describe("plaintexts over QP", function()
  it("encode with {basis = \"QP\"}: the active Q rows, then every P row, in both domains", function()
    local e = fh.CkksEngine(small, { seed = 1 })
    local ctx = e.context
    local x = fh.rand({ e.num_slots }, { dtype = "float64", generator = fh.Generator(2) }) - 0.5
    local pq, pqp = e:encode(x, { level = 1 }), e:encode(x, { level = 1, basis = "QP" })
    assert.are.equal("QP", pqp.modulus_basis)
    assert.are.same({ 1, 2, 3, 4, 5 }, pqp.prime_ids) -- Q rows 1..3 at level 1, then the P primes 4, 5
    assert.are.same({ 5, ctx.ring_degree }, pqp.data.shape)
    -- the Q rows are the Q plaintext's words; the P rows the same integers modulo P
    assert.is_true(fh.equal(pqp.data:narrow(1, 1, 3), pq.data))
    local n = e:prepare_plaintext_for_multiplication(pqp)
    assert.are.equal("QP", n.modulus_basis)
    assert.are.equal("ntt", n.polynomial_domain)
    assert.are.equal("montgomery", n.residue_representation)
    assert.is_true(fh.equal(n.data:narrow(1, 1, 3), e:prepare_plaintext_for_multiplication(pq).data))
    local back = e:ntt_domain_to_coefficient_domain(n)
    assert.is_true(fh.equal(back.data, pqp.data))
    -- the P rows: the integer coefficients (centred Q residues) modulo each P prime
    local c = pq.data:select(1, 3):tolist() -- the base prime's row: coefficients are small
    local q = ctx.q_primes[#ctx.q_primes]
    for k = 1, 2 do
      local p = ctx.p_primes[k]
      local row = pqp.data:select(1, 3 + k):tolist()
      for j = 1, 8 do
        -- the centred integer modulo p, in uint64 arithmetic
        local want
        if c[j] > q / 2 then
          local r = (q - c[j]) % p
          want = r == 0 and r or p - r
        else
          want = c[j] % p
        end
        assert.are.equal(want, row[j], ("P row %d, coefficient %d"):format(k, j))
      end
    end
  end)

  it("are refused where a Q plaintext is needed, and basis is checked", function()
    local e = fh.CkksEngine(small, { seed = 1 })
    local sk = e:create_secret_key()
    local pk = e:create_public_key(sk)
    local ct = e:coefficient_domain_to_ntt_domain(e:encrypt_message(1.0, pk))
    local pqp = e:prepare_plaintext_for_multiplication(e:encode(0.5, { basis = "QP" }))
    H.expect_error("StateError", { "^CkksEngine:multiply_plaintext: modulus_basis of pt is QP, expected Q" },
      e.multiply_plaintext, e, ct, pqp)
    H.expect_error("StateError", { "^CkksEngine:decode: modulus_basis of the plaintext is QP, expected Q" },
      e.decode, e, pqp)
    H.expect_error("StateError", { "^CkksEngine:encrypt: modulus_basis of the plaintext is QP, expected Q" },
      e.encrypt, e, e:encode(0.5, { basis = "QP" }), pk)
    H.expect_error("ValueError", { "^CkksEngine:encode: option 'basis' expected \"Q\" or \"QP\", got 'P'" },
      e.encode, e, 0.5, { basis = "P" })
    H.expect_error("ValueError", { "^CkksEngine:encode: option 'basis' expected \"Q\" or \"QP\", got number" },
      e.encode, e, 0.5, { basis = 2 })
    H.expect_error("ValueError", { "^CkksEngine:encode: unknown option 'bases'" }, e.encode, e, 0.5, { bases = "QP" })
  end)
end)
