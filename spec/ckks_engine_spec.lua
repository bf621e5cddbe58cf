-- fh.CkksEngine on the CPU: keys, encoding, encryption, the evaluator, its
-- preconditions and determinism. Most specs use small, deliberately insecure
-- custom parameters (N = 2^10, allow_insecure=true) to stay fast; a few use
-- the 8192-slot preset. Random messages print their seed (FHELIUM_SEED
-- replays one).
local fh = require "fhelium"
local H = require "spec.helpers"

local TOL = 1e-5 -- FHElium's README tolerance for messages of magnitude ~1e-2 at scale 2^40

local function small_engine(opts)
  opts = opts or {}
  return fh.CkksEngine({
    log_n = opts.log_n or 10,
    q_bits = opts.q_bits or { 40, 40, 40, 60 },
    p_bits = opts.p_bits or { 60 },
    scale = 2 ^ 40,
    allow_insecure = true,
  }, { seed = opts.seed })
end

local I = fh.tensor({ { 0, 1 } }, { dtype = "complex128" })
local function real_msg(g, shape) return fh.randn(shape, { generator = g, dtype = "float64" }) * 0.01 end
local function complex_msg(g, shape)
  return fh.tensor(real_msg(g, shape), { dtype = "complex128" }) + fh.tensor(real_msg(g, shape), { dtype = "complex128" }) * I
end
local function close(got, want, tol)
  local d = fh.max_abs_diff(got, want)
  assert(d < (tol or TOL), ("max abs error %g exceeds %g"):format(d, tol or TOL))
  return d
end
-- torch.roll(m, r) along the last axis of a [S] or [B, S] tensor
local function roll(t, r)
  local l = t:tolist()
  local function roll1(v)
    local S, out = #v, {}
    for j = 1, S do out[j] = v[((j - 1 - r) % S) + 1] end
    return out
  end
  if type(l[1]) == "table" and type(l[1][1]) == "table" or (t:dim() == 2) then
    local out = {}
    for b = 1, #l do out[b] = roll1(l[b]) end
    return fh.tensor(out, { dtype = t.dtype })
  end
  return fh.tensor(roll1(l), { dtype = t.dtype })
end
local function launches() return fh.info().launches end

describe("fh.CkksEngine construction", function()
  it("builds from a preset with the context's fields", function()
    local e = fh.CkksEngine(fh.Preset.slots8192_scale40_levels7_int64, { device = "cpu" })
    local c = e.context
    assert.equal(16384, c.ring_degree)
    assert.equal(8192, c.num_slots)
    assert.equal(2 ^ 40, c.default_scale)
    assert.equal(c.max_level, e.max_level)
    assert.equal(#c.q_primes - 2, c.max_level)
    assert.is_true(#c.p_primes >= 1)
    assert.is_string(c.id)
    assert.equal("cpu", e.device)
    assert.is_false(e.seeded)
    assert.equal(math.ceil(#c.q_primes / #c.p_primes), e.dnum)
  end)

  it("builds from explicit bit sizes: NTT-friendly primes, scale primes near 2^b", function()
    local e = fh.CkksEngine({ log_n = 13, q_bits = { 40, 40, 60 }, p_bits = { 60 }, scale = 2 ^ 40 })
    local c = e.context
    assert.equal(8192, c.ring_degree)
    assert.equal(3, #c.q_primes)
    for _, q in ipairs(c.primes) do
      assert.is_true(fh.is_prime(q))
      assert.equal(1ULL, q % 16384ULL)
    end
    for i = 1, 2 do
      local q = tonumber(c.q_primes[i])
      assert.is_true(math.abs(q / 2 ^ 40 - 1) < 1e-3)
    end
    assert.is_true(c.modulus_bits <= c.security_budget_bits)
  end)

  it("rejects explicit parameters above the 128-bit budget unless allow_insecure", function()
    local p = { log_n = 10, q_bits = { 40, 40, 60 }, p_bits = { 60 }, scale = 2 ^ 40 }
    H.expect_error("ValueError", { "exceeds the 128%-bit security budget", "26 bits" }, fh.CkksEngine, p)
    p.allow_insecure = true
    assert.equal(1024, fh.CkksEngine(p).context.ring_degree)
  end)

  it("rejects bad parameters and options", function()
    H.expect_error("ValueError", "unknown option 'sed'", fh.CkksEngine, fh.Preset.slots8192_scale40_levels7_int64,
      { sed = 1 })
    H.expect_error("ValueError", "unknown option 'qbits'", fh.CkksEngine, { log_n = 10, qbits = { 40 } })
    H.expect_error("ValueError", "between 20 and 60 bits", fh.CkksEngine,
      { log_n = 10, q_bits = { 40, 70 }, p_bits = { 60 }, allow_insecure = true })
    H.expect_error("ValueError", "unknown preset", fh.CkksEngine, "slots1-nope")
    H.expect_error("TypeError", "expected a preset name", fh.CkksEngine, 42)
    H.expect_error("ValueError", "seed must be non%-negative", fh.CkksEngine, fh.Preset.slots8192_scale40_levels7_int64,
      { seed = -1LL })
    H.expect_error("ValueError", "seed must be a non%-negative integer", fh.CkksEngine,
      fh.Preset.slots8192_scale40_levels7_int64, { seed = 1.5 })
    H.expect_error("ValueError", "log_n is required", fh.CkksEngine, { q_bits = { 40, 60 }, p_bits = { 60 } })
    H.expect_error("ValueError", "q_bits needs at least 2 sizes", fh.CkksEngine,
      { log_n = 10, q_bits = { 40 }, p_bits = { 60 }, allow_insecure = true })
  end)

  if not H.has_gpu then
    it("reports a CUDA device without CUDA as a CudaError", function()
      H.expect_error("CudaError", "no CUDA device", fh.CkksEngine, fh.Preset.slots8192_scale40_levels7_int64,
        { device = "cuda" })
    end)
  end
end)

describe("ckks encoding", function()
  local seed = H.seed("ckks engine encoding")

  it("round-trips below 1e-9 relative error at scale 2^40 at every level", function()
    local g = fh.Generator(seed)
    local e = small_engine({ q_bits = { 40, 40, 40, 40, 60 } })
    local z = complex_msg(g, { 2, 512 }) * 100
    local zmax = fh.max_abs_diff(z, fh.zeros(z.shape, { dtype = "complex128" }))
    for level = 0, e.max_level do
      local pt = e:encode(z, { level = level })
      assert.equal(level, pt.level)
      assert.equal(2 ^ 40, pt.scale)
      assert.same({ 2 }, pt.batch_shape)
      assert.equal("coefficient", pt.polynomial_domain)
      assert.is_true(fh.max_abs_diff(e:decode(pt), z) / zmax < 1e-9)
      -- NTT-domain plaintexts decode too
      local ptn = e:prepare_plaintext_for_multiplication(pt)
      assert.equal("montgomery", ptn.residue_representation)
      assert.is_true(fh.max_abs_diff(e:decode(ptn), z) / zmax < 1e-9)
    end
  end)

  it("round-trips on the 8192-slot preset at every level", function()
    local g = fh.Generator(seed + 1)
    local e = fh.CkksEngine(fh.Preset.slots8192_scale40_levels7_int64)
    local z = fh.randn({ 8192 }, { generator = g, dtype = "float64" })
    local zmax = fh.max_abs_diff(z, fh.zeros({ 8192 }, { dtype = "float64" }))
    for level = 0, e.max_level do
      local d = e:decode(e:encode(z, { level = level }), { is_real = true })
      assert.equal("float64", d.dtype)
      assert.is_true(fh.max_abs_diff(d, z) / zmax < 1e-9)
    end
  end)

  it("accepts numbers, lists and {re, im} pairs", function()
    local e = small_engine()
    local d = e:decode(e:encode(0.25), { is_real = true }):tolist()
    for j = 1, 512 do assert.is_true(math.abs(d[j] - 0.25) < 1e-9) end
    d = e:decode(e:encode({ 1, 2, 3 }), { is_real = true }):tolist()
    assert.is_true(math.abs(d[3] - 3) < 1e-9 and math.abs(d[4]) < 1e-9)
    d = e:decode(e:encode({ { 1, 2 }, { 3, -4 } }, { complex = true })):tolist()
    assert.is_true(math.abs(d[2][1] - 3) < 1e-9 and math.abs(d[2][2] + 4) < 1e-9)
  end)

  describe("message forms (docs/ckks.md, Messages)", function()
    local e = small_engine({ seed = 5 })
    local sk = e:create_secret_key()
    local pk = e:create_public_key(sk)
    local function near(got, want)
      assert.equal(#want, #got)
      for j = 1, #want do
        local w = want[j]
        if type(w) == "table" then
          assert.is_true(math.abs(got[j][1] - w[1]) < 1e-6 and math.abs(got[j][2] - w[2]) < 1e-6,
            ("slot %d: got %s%+gi, want %s%+gi"):format(j, got[j][1], got[j][2], w[1], w[2]))
        else
          assert.is_true(math.abs(got[j] - w) < 1e-6, ("slot %d: got %s, want %s"):format(j, got[j], w))
        end
      end
    end
    local function slots(first, fill)
      local r = {}
      for j = 1, 512 do r[j] = first[j] or fill end
      return r
    end

    it("reads a two-element list as two real slots, then zeros (never as one complex number)", function()
      near(e:decode(e:encode({ 5, 6 }), { is_real = true }):tolist(), slots({ 5, 6 }, 0))
      near(e:decrypt_message(e:encrypt_message({ 5, 6 }, pk), sk, { is_real = true }):tolist(), slots({ 5, 6 }, 0))
      -- decoded as complex: the imaginary parts are zero
      near(e:decode(e:encode({ 5, 6 })):tolist(), slots({ { 5, 0 }, { 6, 0 } }, { 0, 0 }))
    end)

    it("reads lists of any length the same way", function()
      for n = 1, 4 do
        local m = {}
        for j = 1, n do m[j] = j + 0.5 end
        near(e:decode(e:encode(m), { is_real = true }):tolist(), slots(m, 0))
      end
    end)

    it("reads nested lists of numbers as a batch [batch, slot], also with two slots", function()
      local d = e:decode(e:encode({ { 5, 6 }, { 7, 8 } }), { is_real = true })
      assert.same({ 2, 512 }, d.shape)
      local l = d:tolist()
      near(l[1], slots({ 5, 6 }, 0))
      near(l[2], slots({ 7, 8 }, 0))
    end)

    it("reads complex slots from complex = true lists of {re, im} pairs and from complex128 tensors", function()
      local want = slots({ { 5, 6 }, { -1, 0.5 } }, { 0, 0 })
      near(e:decode(e:encode({ { 5, 6 }, { -1, 0.5 } }, { complex = true })):tolist(), want)
      near(e:decrypt_message(e:encrypt_message({ { 5, 6 }, { -1, 0.5 } }, pk, { complex = true }), sk):tolist(), want)
      local t = fh.tensor({ { 5, 6 }, { -1, 0.5 } }, { dtype = "complex128" })
      near(e:decode(e:encode(t)):tolist(), want)
      -- one complex slot, and a batch of complex messages
      near(e:decode(e:encode({ { 5, 6 } }, { complex = true })):tolist(), slots({ { 5, 6 } }, { 0, 0 }))
      local b = e:decode(e:encode({ { { 1, 2 } }, { { 3, 4 } } }, { complex = true }))
      assert.same({ 2, 512 }, b.shape)
      near(b:tolist()[2], slots({ { 3, 4 } }, { 0, 0 }))
    end)

    it("fills every slot from a number or a 0-dim tensor", function()
      near(e:decode(e:encode(5), { is_real = true }):tolist(), slots({}, 5))
      near(e:decode(e:encode(fh.tensor({ 5, 6 }, { dtype = "complex128" }))):tolist(), slots({}, { 5, 6 }))
    end)

    it("rejects ambiguous and malformed messages, naming the function and msg", function()
      H.expect_error("TypeError", "^CkksEngine:encode: msg with complex = true expected a list of {re, im} pairs, got a single pair",
        e.encode, e, { 5, 6 }, { complex = true })
      H.expect_error("TypeError", "^CkksEngine:encode: msg%[2%] expected a {re, im} pair of numbers, got number",
        e.encode, e, { { 5, 6 }, 7 }, { complex = true })
      H.expect_error("TypeError", "^CkksEngine:encode: msg with complex = true expected a list of {re, im} pairs, got number",
        e.encode, e, 5, { complex = true })
      H.expect_error("TypeError", "^CkksEngine:encrypt_message: option complex = true applies to Lua lists",
        e.encrypt_message, e, fh.zeros({ 2 }, { dtype = "float64" }), pk, { complex = true })
      H.expect_error("TypeError", "^CkksEngine:encode: option 'complex' expected a boolean, got string",
        e.encode, e, { 1 }, { complex = "yes" })
      H.expect_error("ValueError", "^CkksEngine:encode: msg%[2%] is a table but the msg has 1 nested dimension",
        e.encode, e, { 5, { 1, 2 } })
      H.expect_error("ValueError", "^CkksEngine:encode: ragged nested tables: msg%[2%] has 3 elements, expected 2",
        e.encode, e, { { 1, 2 }, { 3, 4, 5 } })
      H.expect_error("TypeError", "^CkksEngine:encode: msg%[1%] expected a number or int64/uint64 cdata, got boolean",
        e.encode, e, { true })
      H.expect_error("ValueError", "^CkksEngine:encrypt_message: msg is an empty list", e.encrypt_message, e, {}, pk)
      H.expect_error("TypeError", "^CkksEngine:encode: msg expected a number, a list or a tensor, got string",
        e.encode, e, "5")
    end)
  end)

  it("rejects out-of-range levels, bad scales and oversized messages", function()
    local e = small_engine()
    H.expect_error("StateError", "level 3 is outside", e.encode, e, { 1 }, { level = 3 })
    H.expect_error("ValueError", "scale must be positive", e.encode, e, { 1 }, { scale = -1 })
    H.expect_error("ValueError", "unknown option 'lvl'", e.encode, e, { 1 }, { lvl = 1 })
    H.expect_error("TypeError", "^CkksEngine:encode: options expected a table, got string", e.encode, e, { 1 }, "x")
    H.expect_error("TypeError", "^CkksEngine:encode: option 'level' expected an integer, got string", e.encode, e,
      { 1 }, { level = "1" })
    H.expect_error("TypeError", "^CkksEngine:encode: option 'scale' expected a number, got boolean", e.encode, e,
      { 1 }, { scale = true })
    H.expect_error("ValueError", "513 slots", e.encode, e, fh.zeros({ 513 }, { dtype = "float64" }))
  end)
end)

describe("ckks evaluator (custom N=2^10)", function()
  local seed = H.seed("ckks evaluator")
  local g = fh.Generator(seed)
  local e = small_engine({ q_bits = { 40, 40, 40, 60 }, p_bits = { 60 }, seed = seed })
  local sk = e:create_secret_key()
  local pk = e:create_public_key(sk)
  local rlk = e:create_relinearization_key(sk)

  it("runs the quick-start sequence exactly as written", function()
    local x, y = real_msg(g, { 512 }), real_msg(g, { 512 })
    local cx = e:encrypt_message(x, pk)
    local xn = e:coefficient_domain_to_ntt_domain(cx)
    local cy = e:encrypt_message(y, pk)
    local yn = e:coefficient_domain_to_ntt_domain(cy)
    local p = e:rescale_to_next_level(e:relinearize(e:multiply(xn, yn), rlk))
    close(e:decrypt_message(p, sk, { is_real = true }), x * y)
    assert.equal(1, p.level)
    assert.equal(2 ^ 80 / tonumber(e.context.q_primes[1]), p.scale)
    assert.equal("ntt", p.polynomial_domain)
    assert.equal(2, p.num_components)
  end)

  it("encrypts fresh values in the coefficient domain and decrypts real and complex messages", function()
    local x, z = real_msg(g, { 512 }), complex_msg(g, { 512 })
    local cx = e:encrypt_message(x, pk)
    assert.equal("coefficient", cx.polynomial_domain)
    assert.equal("standard", cx.residue_representation)
    assert.equal(0, cx.level)
    assert.same({ 0, 1, 2, 3 }, cx.prime_ids)
    close(e:decrypt_message(cx, sk, { is_real = true }), x)
    close(e:decrypt_message(e:encrypt_message(z, pk), sk), z)
    -- decrypt returns an RNS plaintext in the ciphertext's domain
    local pt = e:decrypt(e:coefficient_domain_to_ntt_domain(cx), sk)
    assert.equal("ntt", pt.polynomial_domain)
    close(e:decode(pt, { is_real = true }), x)
  end)

  for _, dom in ipairs { "coefficient", "ntt" } do
    it(("adds, subtracts and negates (%s domain)"):format(dom), function()
      local a, b = complex_msg(g, { 512 }), complex_msg(g, { 512 })
      local ca, cb = e:encrypt_message(a, pk), e:encrypt_message(b, pk)
      if dom == "ntt" then
        ca, cb = e:coefficient_domain_to_ntt_domain(ca), e:coefficient_domain_to_ntt_domain(cb)
      end
      close(e:decrypt_message(e:add(ca, cb), sk), a + b)
      close(e:decrypt_message(e:sub(ca, cb), sk), a - b)
      close(e:decrypt_message(e:negate(ca), sk), -a)
      assert.equal(dom, e:add(ca, cb).polynomial_domain)
    end)

    it(("adds and subtracts plaintexts, RNS and slots (%s domain)"):format(dom), function()
      local a, b = real_msg(g, { 512 }), real_msg(g, { 512 })
      local ca = e:encrypt_message(a, pk)
      local pb = e:encode(b)
      if dom == "ntt" then
        ca = e:coefficient_domain_to_ntt_domain(ca)
        pb = e:coefficient_domain_to_ntt_domain(pb)
      end
      close(e:decrypt_message(e:add_plaintext(ca, pb), sk, { is_real = true }), a + b)
      close(e:decrypt_message(e:sub_plaintext(ca, pb), sk, { is_real = true }), a - b)
      local slots = fh.Plaintext { message = b, level = 0, scale = 2 ^ 40 }
      close(e:decrypt_message(e:add_plaintext(ca, slots), sk, { is_real = true }), a + b)
    end)

    it(("rotates by positive, negative and zero steps like torch.roll (%s domain)"):format(dom), function()
      local z = complex_msg(g, { 512 })
      local cz = e:encrypt_message(z, pk)
      if dom == "ntt" then cz = e:coefficient_domain_to_ntt_domain(cz) end
      for _, r in ipairs { 1, 5, -1, -37, 0, 512, 600 } do
        if r % 512 ~= 0 then e:create_rotation_key(sk, r) end
        local rc = e:rotate_by_step(cz, r)
        assert.equal(dom, rc.polynomial_domain)
        close(e:decrypt_message(rc, sk), roll(z, r))
      end
      local rk = e:create_rotation_key(sk, 3)
      assert.equal(3, rk.step)
      close(e:decrypt_message(e:rotate_with_key(cz, rk), sk), roll(z, 3))
      close(e:decrypt_message(e:rotate_by_step(cz, 3 - 512, rk), sk), roll(z, 3))
    end)

    it(("conjugates every slot (%s domain)"):format(dom), function()
      local z = complex_msg(g, { 512 })
      local cz = e:encrypt_message(z, pk)
      if dom == "ntt" then cz = e:coefficient_domain_to_ntt_domain(cz) end
      local ck = e:create_conjugation_key(sk)
      local conj = fh.tensor(z:tolist(), { dtype = "complex128" })
      local l = z:tolist()
      for j = 1, #l do l[j][2] = -l[j][2] end
      conj = fh.tensor(l, { dtype = "complex128" })
      close(e:decrypt_message(e:conjugate(cz), sk), conj)
      close(e:decrypt_message(e:conjugate(cz, ck), sk), conj)
    end)

    it(("relinearizes and rescales (%s domain) at every level"):format(dom), function()
      local a, b = real_msg(g, { 512 }), real_msg(g, { 512 })
      for level = 0, e.max_level - 1 do
        local ca = e:coefficient_domain_to_ntt_domain(e:encrypt_message(a, pk, { level = level }))
        local cb = e:coefficient_domain_to_ntt_domain(e:encrypt_message(b, pk, { level = level }))
        local m3 = e:multiply(ca, cb)
        assert.equal(3, m3.num_components)
        close(e:decrypt_message(m3, sk, { is_real = true }), a * b)
        if dom == "coefficient" then m3 = e:ntt_domain_to_coefficient_domain(m3) end
        local r = e:relinearize(m3, rlk)
        assert.equal(2, r.num_components)
        assert.equal(dom, r.polynomial_domain)
        local rs = e:rescale_to_next_level(r)
        assert.equal(level + 1, rs.level)
        assert.equal(dom, rs.polynomial_domain)
        assert.equal(r.scale / tonumber(e.context.q_primes[level + 1]), rs.scale)
        close(e:decrypt_message(rs, sk, { is_real = true }), a * b)
        -- the two domains' rescales are the same exact rounding, word for word
        -- (the coefficient one is one pass; the NTT one a centred conversion)
        local other = dom == "coefficient" and e:ntt_domain_to_coefficient_domain(
          e:rescale_to_next_level(e:coefficient_domain_to_ntt_domain(r)))
          or e:coefficient_domain_to_ntt_domain(e:rescale_to_next_level(e:ntt_domain_to_coefficient_domain(r)))
        assert.is_true(fh.equal(rs.data, other.data), ("level %d: the domains' rescales differ"):format(level))
      end
    end)
  end

  it("rescales batches of three-component ciphertexts alike in both domains, word for word", function()
    -- the NTT-domain rescale runs the mod-down kernel, whose groups pair up as (value, component):
    -- an odd number of groups (3 components, a batch of 3) takes every row to its own place
    local e = fh.CkksEngine(fh.Preset.slots8192_scale40_levels7_int64, { seed = 3 })
    local sk = e:create_secret_key()
    local pk = e:create_public_key(sk)
    local ct = e:coefficient_domain_to_ntt_domain(e:encrypt_message({ { 1, 2 }, { 3, 4 }, { 5, 6 } }, pk))
    local m = e:multiply(ct, ct)
    local first
    for level = 0, 2 do
      local a = e:rescale_to_next_level(m)
      local b = e:coefficient_domain_to_ntt_domain(e:rescale_to_next_level(e:ntt_domain_to_coefficient_domain(m)))
      assert.are.equal(3, a.num_components)
      assert.is_true(fh.equal(a.data, b.data), ("level %d: the domains' rescales differ"):format(level))
      first = first or a
      m = a
    end
    local got = e:decrypt_message(first, sk, { is_real = true }):narrow(2, 1, 2):tolist()
    for b, want in ipairs { { 1, 4 }, { 9, 16 }, { 25, 36 } } do
      for j = 1, 2 do assert.is_true(math.abs(got[b][j] - want[j]) < 1e-4, got[b][j]) end
    end
  end)

  it("multiplies by prepared plaintexts", function()
    local a, b = complex_msg(g, { 512 }), complex_msg(g, { 512 })
    local ca = e:coefficient_domain_to_ntt_domain(e:encrypt_message(a, pk))
    local pb = e:prepare_plaintext_for_multiplication(e:encode(b))
    assert.equal("ntt", pb.polynomial_domain)
    local m = e:multiply_plaintext(ca, pb)
    assert.equal(2 ^ 80, m.scale)
    close(e:decrypt_message(e:rescale_to_next_level(m), sk), a * b)
    -- slots plaintexts are prepared (encoded) at their own level and scale
    local ps = e:prepare_plaintext_for_multiplication(fh.Plaintext { message = b, level = 0, scale = 2 ^ 40 })
    close(e:decrypt_message(e:rescale_to_next_level(e:multiply_plaintext(ca, ps)), sk), a * b)
  end)

  it("keeps batches: batched encryption, stack_batch, sum_ciphertext_batch, broadcast plaintexts", function()
    local xs = real_msg(g, { 3, 512 })
    local cb = e:encrypt_message(xs, pk)
    assert.same({ 3 }, cb.batch_shape)
    assert.same({ 2, 3, 4, 1024 }, cb.data.shape)
    close(e:decrypt_message(cb, sk, { is_real = true }), xs)
    local sum = e:sum_ciphertext_batch(cb)
    assert.same({}, sum.batch_shape)
    close(e:decrypt_message(sum, sk, { is_real = true }), xs:select(1, 1) + xs:select(1, 2) + xs:select(1, 3))
    local c1, c2 = e:encrypt_message(xs:select(1, 1), pk), e:encrypt_message(xs:select(1, 2), pk)
    local st = e:stack_batch({ c1, c2 })
    assert.same({ 2 }, st.batch_shape)
    close(e:decrypt_message(st, sk, { is_real = true }):select(1, 2), xs:select(1, 2))
    -- an unbatched plaintext broadcasts over the batch
    local y = real_msg(g, { 512 })
    local added = e:add_plaintext(cb, e:encode(y))
    close(e:decrypt_message(added, sk, { is_real = true }):select(1, 3), xs:select(1, 3) + y)
    -- batched multiply, relinearize, rescale, rotate
    local bn = e:coefficient_domain_to_ntt_domain(cb)
    local sq = e:rescale_to_next_level(e:relinearize(e:multiply(bn, bn), rlk))
    close(e:decrypt_message(sq, sk, { is_real = true }), xs * xs)
    e:create_rotation_key(sk, 2)
    close(e:decrypt_message(e:rotate_by_step(cb, 2), sk, { is_real = true }), roll(xs, 2))
  end)

  it("encrypts zero like a ciphertext", function()
    local x = real_msg(g, { 2, 512 })
    local cx = e:coefficient_domain_to_ntt_domain(e:encrypt_message(x, pk, { level = 1 }))
    local z = e:encrypt_zero_like(cx, pk)
    assert.equal(1, z.level)
    assert.equal("ntt", z.polynomial_domain)
    assert.same({ 2 }, z.batch_shape)
    close(e:decrypt_message(z, sk, { is_real = true }), fh.zeros({ 2, 512 }, { dtype = "float64" }))
    close(e:decrypt_message(e:add(cx, z), sk, { is_real = true }), x)
  end)

  it("survives a chain of max_level multiplications", function()
    local function msg() return fh.rand({ 512 }, { generator = g, dtype = "float64" }) * 0.2 + 0.9 end
    local want = msg()
    local ct = e:coefficient_domain_to_ntt_domain(e:encrypt_message(want, pk))
    for _ = 1, e.max_level do
      local x = msg()
      local cx = e:coefficient_domain_to_ntt_domain(e:encrypt_message(x, pk, { level = ct.level }))
      ct = e:rescale_to_next_level(e:relinearize(e:multiply(ct, cx), rlk))
      want = want * x
    end
    assert.equal(e.max_level, ct.level)
    close(e:decrypt_message(ct, sk, { is_real = true }), want)
  end)
end)

describe("ckks on presets", function()
  local seed = H.seed("ckks presets")

  local function quick_start(preset)
    local g = fh.Generator(seed)
    local e = fh.CkksEngine(preset, { seed = seed })
    local sk = e:create_secret_key()
    local pk = e:create_public_key(sk)
    local rlk = e:create_relinearization_key(sk)
    local S = e.context.num_slots
    local x, y = real_msg(g, { S }), real_msg(g, { S })
    local cx = e:encrypt_message(x, pk)
    local xn = e:coefficient_domain_to_ntt_domain(cx)
    local cy = e:encrypt_message(y, pk)
    local yn = e:coefficient_domain_to_ntt_domain(cy)
    local p = e:rescale_to_next_level(e:relinearize(e:multiply(xn, yn), rlk))
    -- the README tolerance is for scale 2^40; noise scales inversely with the scale
    local tol = TOL * 2 ^ 40 / e.context.default_scale
    close(e:decrypt_message(p, sk, { is_real = true }), x * y, tol)
    e:create_rotation_key(sk, -5)
    close(e:decrypt_message(e:rotate_by_step(xn, -5), sk, { is_real = true }), roll(x, -5), tol)
  end

  it("runs the quick-start sequence and a rotation on the 8192-slot preset", function()
    quick_start(fh.Preset.slots8192_scale40_levels7_int64)
  end)

  if os.getenv("FHELIUM_SLOW") == "1" then
    for _, name in ipairs { "slots16384_scale40_levels16_int64", "slots32768_scale40_levels34_int64",
      "slots16384_scale50_levels12_int64", "slots8192_scale30_levels9_int64" } do
      it("runs the quick-start sequence on " .. name .. " (FHELIUM_SLOW)", function() quick_start(fh.Preset[name]) end)
    end
  else
    H.skip_it("the quick-start sequence on the larger presets", "set FHELIUM_SLOW=1 to run it")
  end
end)

describe("ckks evaluator with two P primes (partial digits at every level)", function()
  local seed = H.seed("ckks two P primes")
  local g = fh.Generator(seed)
  local e = small_engine({ q_bits = { 40, 40, 40, 40, 60 }, p_bits = { 60, 60 }, seed = seed })
  local sk = e:create_secret_key()
  local pk = e:create_public_key(sk)
  local rlk = e:create_relinearization_key(sk)
  e:create_rotation_key(sk, -3)

  it("has dnum = ceil(#Q / #P) digits", function()
    assert.equal(3, e.dnum)
    assert.equal(3, rlk.num_digits)
  end)

  it("multiplies, relinearizes, rescales and rotates at every level", function()
    for level = 0, e.max_level do
      local a, b = complex_msg(g, { 512 }), complex_msg(g, { 512 })
      local ca = e:coefficient_domain_to_ntt_domain(e:encrypt_message(a, pk, { level = level }))
      local cb = e:coefficient_domain_to_ntt_domain(e:encrypt_message(b, pk, { level = level }))
      local r = e:relinearize(e:multiply(ca, cb), rlk)
      close(e:decrypt_message(r, sk), a * b)
      if level < e.max_level then close(e:decrypt_message(e:rescale_to_next_level(r), sk), a * b) end
      close(e:decrypt_message(e:rotate_by_step(ca, -3), sk), roll(a, -3))
    end
  end)
end)

describe("ckks preconditions", function()
  local seed = H.seed("ckks preconditions")
  local g = fh.Generator(seed)
  local e = small_engine({ seed = seed })
  local sk = e:create_secret_key()
  local pk = e:create_public_key(sk)
  local rlk = e:create_relinearization_key(sk)
  local x = real_msg(g, { 512 })
  local c0 = e:encrypt_message(x, pk)
  local n0 = e:coefficient_domain_to_ntt_domain(c0)
  local c1 = e:encrypt_message(x, pk, { level = 1 })
  local m3 = e:multiply(n0, n0)

  -- expect a StateError naming `field`, with no launch submitted
  local function state_error(field, fn, ...)
    local before = launches()
    local err = H.expect_error("StateError", field, fn, ...)
    assert.equal(before, launches(), "a launch ran before the precondition check")
    return err
  end

  it("add / sub: level, scale, domain, component count, context", function()
    state_error("level", e.add, e, c0, c1)
    state_error("level", e.sub, e, c0, c1)
    local other_scale = e:encrypt_message(x, pk, { scale = 2 ^ 30 })
    state_error("scale", e.add, e, c0, other_scale)
    state_error("polynomial_domain", e.add, e, c0, n0)
    state_error("num_components", e.add, e, n0, m3)
    local e2 = small_engine({ q_bits = { 40, 40, 50, 60 } })
    local sk2 = e2:create_secret_key()
    local foreign = e2:encrypt_message(x, e2:create_public_key(sk2))
    state_error("context_id", e.add, e, c0, foreign)
    state_error("context_id", e.decrypt, e, foreign, sk)
    -- scales within the relative tolerance match
    local near = e:encrypt_message(x, pk, { scale = 2 ^ 40 * (1 + 1e-9) })
    close(e:decrypt_message(e:add(c0, near), sk, { is_real = true }), x * 2)
  end)

  it("multiply: NTT domain, two components, one level", function()
    state_error("polynomial_domain", e.multiply, e, c0, c0)
    state_error("num_components", e.multiply, e, m3, n0)
    state_error("level", e.multiply, e, n0, e:coefficient_domain_to_ntt_domain(c1))
  end)

  it("relinearize, rescale, rotate, conjugate", function()
    state_error("num_components", e.relinearize, e, n0, rlk)
    H.expect_error("TypeError", "expected a RelinearizationKey, got a PublicKey", e.relinearize, e, m3, pk)
    local top = e:encrypt_message(x, pk, { level = e.max_level })
    state_error("level", e.rescale_to_next_level, e, top)
    state_error("step", e.rotate_by_step, e, c0, 7)
    local rk = e:create_rotation_key(sk, 2)
    state_error("step", e.rotate_by_step, e, c0, 3, rk)
    state_error("num_components", e.rotate_by_step, e, m3, 2)
    state_error("conjugation key", e.conjugate, e, c0)
  end)

  it("plaintext operands: prepared, same level, scale and domain", function()
    local pt = e:encode(x)
    state_error("polynomial_domain", e.multiply_plaintext, e, n0, pt)
    state_error("polynomial_domain", e.multiply_plaintext, e, c0, e:prepare_plaintext_for_multiplication(pt))
    state_error("representation", e.multiply_plaintext, e, n0, fh.Plaintext { message = x, level = 0, scale = 2 ^ 40 })
    state_error("level", e.multiply_plaintext, e, n0, e:prepare_plaintext_for_multiplication(e:encode(x, { level = 1 })))
    state_error("level", e.add_plaintext, e, c0, e:encode(x, { level = 1 }))
    state_error("scale", e.add_plaintext, e, c0, e:encode(x, { scale = 2 ^ 35 }))
    state_error("polynomial_domain", e.add_plaintext, e, c0, e:prepare_plaintext_for_multiplication(pt))
    state_error("polynomial_domain", e.coefficient_domain_to_ntt_domain, e, n0)
    state_error("polynomial_domain", e.ntt_domain_to_coefficient_domain, e, c0)
  end)

  it("basis and key state", function()
    local qp = fh.Plaintext { context = e.context, data = fh.zeros({ 5, 1024 }, { dtype = "uint64" }), level = 0,
      scale = 2 ^ 40, modulus_basis = "QP" }
    state_error("modulus_basis", e.encrypt, e, qp, pk)
    H.expect_error("TypeError", "expected a SecretKey, got a PublicKey", e.create_public_key, e, pk)
    H.expect_error("TypeError", "expected a CKKS value", e.add, e, c0, 3)
    state_error("polynomial_domain", e.stack_batch, e, { c0, n0 })
  end)

  it("coefficient-domain Montgomery plaintexts: decoded and converted, refused as operands", function()
    local C = fh.core._ckks
    local ctx = e.context
    local tb = C.tables(ctx.log_n, fh.tensor(ctx.primes, { dtype = "uint64" }), ctx.num_q_primes)
    local pt = e:encode(x)
    local mont = C.ew(tb, "to_mont", pt.prime_ids, pt.data)
    local pm = fh.Plaintext { context = ctx, data = mont, level = 0, scale = 2 ^ 40,
      polynomial_domain = "coefficient", residue_representation = "montgomery" }
    close(e:decode(pm, { is_real = true }), x, 1e-9)
    close(e:decode(e:coefficient_domain_to_ntt_domain(pm), { is_real = true }), x, 1e-9)
    state_error("residue_representation", e.add_plaintext, e, c0, pm)
    state_error("residue_representation", e.encrypt, e, pm, pk)
  end)

  it("stack_batch checks every element", function()
    state_error("level", e.stack_batch, e, { c0, c1 })
    H.expect_error("ValueError", "batch shapes differ", e.stack_batch, e, { c0, e:encrypt_message(real_msg(g, { 2, 512 }), pk) })
  end)
end)

describe("ckks operations behind the launch boundary", function()
  local seed = H.seed("ckks capture")
  local g = fh.Generator(seed)
  local e = small_engine({ seed = seed })
  local sk = e:create_secret_key()
  local pk = e:create_public_key(sk)
  local rlk = e:create_relinearization_key(sk)
  e:create_rotation_key(sk, 1)
  local C = fh.core._ckks

  it("records the evaluator as launches on a host tape and replays it on new data in place", function()
    local x, y = real_msg(g, { 512 }), real_msg(g, { 512 })
    local xn = e:coefficient_domain_to_ntt_domain(e:encrypt_message(x, pk))
    local yn = e:coefficient_domain_to_ntt_domain(e:encrypt_message(y, pk))
    local out, rot
    local before = launches()
    local tape = C.capture(function()
      out = e:rescale_to_next_level(e:relinearize(e:multiply(xn, yn), rlk))
      rot = e:rotate_by_step(e:ntt_domain_to_coefficient_domain(xn), 1)
    end)
    assert.equal(before, launches()) -- recorded, not run
    assert.is_true(#tape > 10)
    tape:replay()
    close(e:decrypt_message(out, sk, { is_real = true }), x * y)
    close(e:decrypt_message(rot, sk, { is_real = true }), roll(x, 1))
    -- new inputs copied into the captured input tensors, then replay
    local x2 = real_msg(g, { 512 })
    xn.data:copy_(e:coefficient_domain_to_ntt_domain(e:encrypt_message(x2, pk)).data)
    tape:replay()
    close(e:decrypt_message(out, sk, { is_real = true }), x2 * y)
    close(e:decrypt_message(rot, sk, { is_real = true }), roll(x2, 1))
  end)

  it("refuses to draw randomness during a capture", function()
    local err = H.expect_error("CudaGraphCaptureError", "encrypt draws fresh randomness", C.capture, function()
      e:encrypt_message({ 1, 2 }, pk)
    end)
    assert.equal("capture", err.stage)
    H.expect_error("CudaGraphCaptureError", "create_secret_key", C.capture, function() e:create_secret_key() end)
    H.expect_error("CudaGraphCaptureError", "create_rotation_key", C.capture, function()
      e:create_rotation_key(sk, 2)
    end)
  end)
end)

describe("ckks argument errors", function()
  local e = small_engine({ seed = 11 })
  local sk = e:create_secret_key()
  local pk = e:create_public_key(sk)
  local ct = e:encrypt_message({ 0.5 }, pk)

  it("names wrong value types and non-values", function()
    H.expect_error("TypeError", "expected a Ciphertext, got a PublicKey", e.add, e, ct, pk)
    H.expect_error("TypeError", "argument 2 %(b%) expected a CKKS value, got number", e.add, e, ct, 1)
    H.expect_error("TypeError", "like expected a Ciphertext or an RNS Plaintext, got a SecretKey", e.encrypt_zero_like,
      e, sk, pk)
    H.expect_error("TypeError", "expected a RotationKey, got a SecretKey", e.rotate_with_key, e, ct, sk)
    H.expect_error("TypeError", "expected a ConjugationKey, got a PublicKey", e.conjugate, e, ct, pk)
    H.expect_error("TypeError", "expected a PublicKey, got a SecretKey", e.encrypt, e, e:encode({ 1 }), sk)
    H.expect_error("TypeError", "expected a SecretKey, got a PublicKey", e.decrypt, e, ct, pk)
    H.expect_error("TypeError", "expected a CkksEngine as self", e.add, ct, ct)
  end)

  it("checks lists, steps, options and messages", function()
    H.expect_error("ValueError", "the list is empty", e.stack_batch, e, {})
    H.expect_error("TypeError", "element 2 expected a Ciphertext", e.stack_batch, e, { ct, 3 })
    H.expect_error("ValueError", "step 512 is 0 modulo num_slots 512", e.create_rotation_key, e, sk, 512)
    H.expect_error("ValueError", "unknown option 'real'", e.decrypt_message, e, ct, sk, { real = true })
    H.expect_error("TypeError", "is_real expected a boolean", e.decrypt_message, e, ct, sk, { is_real = 1 })
    H.expect_error("TypeError", "msg expected a number, a list or a tensor", e.encode, e, "x")
    H.expect_error("ValueError", "msg is an empty list", e.encode, e, {})
    H.expect_error("StateError", "representation of the plaintext is slots", e.coefficient_domain_to_ntt_domain, e,
      fh.Plaintext { message = fh.zeros({ 4 }, { dtype = "float64" }), level = 0, scale = 2 ^ 40 })
    H.expect_error("ValueError", "not finite", e.encode, e, { 0 / 0 })
  end)
end)

describe("ckks determinism and keys in files", function()
  it("gives bit-identical keys and ciphertexts for the same seed", function()
    local function run(seed)
      local e = small_engine({ seed = seed })
      local sk = e:create_secret_key()
      local pk = e:create_public_key(sk)
      local rlk = e:create_relinearization_key(sk)
      local ct = e:encrypt_message({ 0.5, -0.25, 0.125 }, pk)
      return sk, pk, rlk, ct
    end
    local a = { run(7) }
    local b = { run(7) }
    local c = { run(8) }
    for i = 1, 4 do
      assert.is_true(fh.equal(a[i].data, b[i].data))
      assert.is_false(fh.equal(a[i].data, c[i].data))
    end
    assert.is_true(small_engine({ seed = 7 }).seeded)
    -- without a seed, two engines draw different keys
    assert.is_false(fh.equal(small_engine():create_secret_key().data, small_engine():create_secret_key().data))
  end)

  it("uses keys that went through serialize / deserialize", function()
    local e = small_engine({ seed = 3 })
    local sk = e:create_secret_key()
    local pk = e:create_public_key(sk)
    local rlk = e:create_relinearization_key(sk)
    local rk = e:create_rotation_key(sk, 1)
    local pk2 = fh.deserialize(fh.serialize(pk))
    local rlk2 = fh.deserialize(fh.serialize(rlk))
    local rk2 = fh.deserialize(fh.serialize(rk))
    local sk2 = fh.deserialize(fh.serialize(sk, { allow_secret = true }))
    local x = fh.tensor({ 0.01, 0.02, 0.03 }, { dtype = "float64" })
    local cx = e:coefficient_domain_to_ntt_domain(e:encrypt_message(x, pk2))
    local sq = e:rescale_to_next_level(e:relinearize(e:multiply(cx, cx), rlk2))
    local d = e:decrypt_message(sq, sk2, { is_real = true }):narrow(1, 1, 3)
    close(d, x * x)
    local r = e:decrypt_message(e:rotate_with_key(cx, rk2), sk2, { is_real = true })
    assert.is_true(math.abs(r:tolist()[2] - 0.01) < TOL)
  end)
end)

describe("ckks engine argument errors", function()
  it("name the method and the argument", function()
    local e = small_engine()
    local sk = e:create_secret_key()
    local ct = e:encrypt(e:encode({ 1 }), e:create_public_key(sk))
    H.expect_error("TypeError", "^CkksEngine:add: expected a CkksEngine as self %(call it with ':'%), got number", e.add,
      5, ct, ct)
    H.expect_error("TypeError", "^CkksEngine:rotate_many: argument 2 %(steps%) expected a list of integers, got number",
      e.rotate_many, e, ct, 5)
    H.expect_error("ValueError", "^CkksEngine:rotate_many: steps is empty", e.rotate_many, e, ct, {})
    H.expect_error("ValueError", "^CkksEngine:rotate_many: argument 3 %(keys%) expected a list of 1 rotation keys",
      e.rotate_many, e, ct, { 1 }, {})
    H.expect_error("TypeError", "^CkksEngine:linear_transform: argument 2 %(steps%) expected a list of integers, got "
      .. "number", e.linear_transform, e, ct, 5)
    H.expect_error("ValueError", "^CkksEngine:linear_transform: steps is empty", e.linear_transform, e, ct, {}, {}, {})
    H.expect_error("TypeError", "^CkksEngine:stack_batch: argument 1 expected a list of ciphertexts, got number",
      e.stack_batch, e, 5)
    H.expect_error("ValueError", "^CkksEngine:stack_batch: the list is empty", e.stack_batch, e, {})
  end)

  it("of the constructor name the parameter", function()
    H.expect_error("TypeError", "fh.CkksEngine: argument 1 expected a preset name %(fh.Preset.%*%), a CkksContext or a "
      .. "parameter table, got boolean", fh.CkksEngine, true)
    H.expect_error("ValueError", "fh.CkksEngine: log_n is required", fh.CkksEngine, { q_bits = { 40 }, p_bits = { 60 } })
    H.expect_error("TypeError", "fh.CkksEngine: q_bits expected a list of prime bit sizes, got number", fh.CkksEngine,
      { log_n = 10, q_bits = 5, p_bits = { 60 } })
    local many = {}
    for i = 1, 200 do many[i] = 40 end
    H.expect_error("ValueError", "fh.CkksEngine: q_bits lists more than 128 sizes", fh.CkksEngine,
      { log_n = 10, q_bits = many, p_bits = { 60 }, allow_insecure = true })
    H.expect_error("TypeError", "fh.CkksEngine: scale expected a number, got string", fh.CkksEngine,
      { log_n = 10, q_bits = { 40, 40 }, p_bits = { 60 }, scale = "x", allow_insecure = true })
  end)
end)
