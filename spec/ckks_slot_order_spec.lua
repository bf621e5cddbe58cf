-- A context's slot-order generator (5, or 3 as FHElium 0.30's presets),
-- max_level (#Q - 2, or #Q - 1) and key-switching digits (#P primes each, or
-- FHElium's "product below P"): encoding, decoding, rotations, conjugation
-- and key switching follow them. Small, deliberately insecure parameters.
local ffi = require "ffi"
local fh = require "fhelium"
local H = require "spec.helpers"

local N = 1024
local M2 = 2 * N

-- `count` primes = 1 mod 2N below 2^bits, descending (uint64_t cdata)
local function primes(bits, count, skip)
  local r, c = {}, 2ULL ^ bits + 1
  skip = skip or 0
  while #r < count do
    c = c - M2
    if fh.is_prime(c) then
      if skip > 0 then skip = skip - 1 else r[#r + 1] = c end
    end
  end
  return r
end

local Q3 = primes(40, 3)
local function context(t)
  local spec = {
    ring_degree = N, default_scale = t.scale or 2 ^ 40, q_primes = t.q or Q3, p_primes = t.p or primes(50, 1),
    enforce_security_budget = false, galois_generator = t.g, max_level = t.max_level, key_digits = t.digits,
  }
  return fh.CkksContext(spec)
end

local function powmod(b, e, m)
  local r = 1
  b = b % m
  while e > 0 do
    if e % 2 == 1 then r = (r * b) % m end
    b = (b * b) % m
    e = math.floor(e / 2)
  end
  return r
end

local I = fh.tensor({ { 0, 1 } }, { dtype = "complex128" })
local function complex_msg(g, n)
  local re = fh.randn({ n }, { generator = g, dtype = "float64" }) * 0.1
  local im = fh.randn({ n }, { generator = g, dtype = "float64" }) * 0.1
  return fh.tensor(re, { dtype = "complex128" }) + fh.tensor(im, { dtype = "complex128" }) * I
end
local function close(got, want, tol)
  local d = fh.max_abs_diff(got, want)
  assert(d < (tol or 1e-5), ("max abs error %g exceeds %g"):format(d, tol or 1e-5))
end
local function roll(t, r)
  local l, out = t:tolist(), {}
  local S = #l
  for j = 1, S do out[j] = l[((j - 1 - r) % S) + 1] end
  return fh.tensor(out, { dtype = t.dtype })
end

-- m(zeta^e) for every slot exponent e, from a one-row coefficient-domain
-- plaintext (centred residues), zeta = exp(i pi / N): the definition of a slot
local function slots_at(pt, exps)
  local q = pt.context:prime(pt.prime_ids[1])
  local row = pt.data:view({ N }):tolist()
  local c = {}
  for k = 1, N do
    local x = row[k]
    c[k] = x > q / 2 and -tonumber(q - x) or tonumber(x)
  end
  local out = {}
  for j, e in ipairs(exps) do
    local re, im = 0, 0
    for k = 0, N - 1 do
      local a = math.pi * ((e * k) % M2) / N
      re = re + c[k + 1] * math.cos(a)
      im = im + c[k + 1] * math.sin(a)
    end
    out[j] = { re / pt.scale, im / pt.scale }
  end
  return fh.tensor(out, { dtype = "complex128" })
end

describe("slot order", function()
  local seed = H.seed("slot order")

  it("is z_j = m(zeta^(5^j)) by default and m(zeta^(3^-j)) with galois_generator = 3 (FHElium's)", function()
    local g = fh.Generator(seed)
    local z = complex_msg(g, N / 2)
    local inv3 = powmod(3, N / 2 - 1, M2) -- 3^-1 mod 2N (3 has order N/2)
    assert.equal(1, (3 * inv3) % M2)
    for _, gen in ipairs { 5, 3 } do
      local ctx = context { g = gen, max_level = 2 }
      assert.equal(gen, ctx.galois_generator)
      local e = fh.CkksEngine(ctx)
      local pt = e:encode(z, { level = ctx.max_level, scale = 2 ^ 30 }) -- one Q row
      assert.equal(1, #pt.prime_ids)
      local exps = {}
      for j = 0, N / 2 - 1 do exps[j + 1] = gen == 5 and powmod(5, j, M2) or powmod(inv3, j, M2) end
      close(slots_at(pt, exps), z, 1e-6)
      close(e:decode(pt), z, 1e-6)
    end
  end)

  it("encodes, rotates like torch.roll, conjugates and switches keys in a generator-3 context", function()
    local g = fh.Generator(seed + 1)
    local ctx = context { g = 3, max_level = 2, digits = "below_p" }
    local e = fh.CkksEngine(ctx, { seed = 7 })
    local sk = e:create_secret_key()
    local pk = e:create_public_key(sk)
    local z = complex_msg(g, N / 2)
    local cz = e:encrypt_message(z, pk)
    close(e:decrypt_message(cz, sk), z)
    for _, dom in ipairs { "coefficient", "ntt" } do
      local c = dom == "ntt" and e:coefficient_domain_to_ntt_domain(cz) or cz
      for _, r in ipairs { 1, 5, -1, -37, 256 } do
        e:create_rotation_key(sk, r)
        close(e:decrypt_message(e:rotate_by_step(c, r), sk), roll(z, r))
      end
      e:create_conjugation_key(sk)
      local l = z:tolist()
      for j = 1, #l do l[j][2] = -l[j][2] end
      close(e:decrypt_message(e:conjugate(c), sk), fh.tensor(l, { dtype = "complex128" }))
    end
  end)

  it("rescales down to level #Q - 1 with max_level = #Q - 1 (every Q prime can be dropped)", function()
    local g = fh.Generator(seed + 2)
    local q = primes(30, 4, 3)
    local ctx = context { q = q, g = 3, max_level = 3, digits = "below_p", p = primes(50, 1), scale = 2 ^ 30 }
    assert.equal(3, ctx.max_level)
    local e = fh.CkksEngine(ctx, { seed = 3 })
    local sk = e:create_secret_key()
    local pk = e:create_public_key(sk)
    local rlk = e:create_relinearization_key(sk)
    local a = (fh.rand({ N / 2 }, { generator = g, dtype = "float64" }) * 2 - 1) * 0.9 -- |a^8| < 0.5
    local ca = e:coefficient_domain_to_ntt_domain(e:encrypt_message(a, pk))
    local want, c = a, ca
    for level = 1, 3 do
      c = e:rescale_to_next_level(e:relinearize(e:multiply(c, c), rlk))
      want = want * want
      assert.equal(level, c.level)
      close(e:decrypt_message(c, sk, { is_real = true }), want, 1e-3)
    end
    assert.equal(1, #c.prime_ids)
    H.expect_error("StateError", "already max_level 3", e.rescale_to_next_level, e, c)
  end)

  it("splits the digits by #P primes or, with key_digits = below_p, by products below P", function()
    local g = fh.Generator(seed + 3)
    local q = primes(40, 5)
    local p = primes(61, 2)
    local a = context { q = q, p = p }
    local b = context { q = q, p = p, digits = "below_p" }
    assert.equal("p_count", a.key_digits)
    assert.equal("below_p", b.key_digits)
    assert.equal(3, a.num_key_digits) -- {q0, q1}, {q2, q3}, {q4}
    assert.equal(2, b.num_key_digits) -- {q0, q1, q2} (2^120 < P ~ 2^122), {q3, q4}
    assert.are_not.equal(a.id, b.id)
    for _, ctx in ipairs { a, b } do
      local e = fh.CkksEngine(ctx, { seed = 5 })
      assert.equal(ctx.num_key_digits, e.dnum)
      local sk = e:create_secret_key()
      local rlk = e:create_relinearization_key(sk)
      assert.equal(ctx.num_key_digits, rlk.num_digits)
      local x = fh.randn({ N / 2 }, { generator = g, dtype = "float64" }) * 0.5
      -- level 2: inside the first digit of b
      local cx = e:coefficient_domain_to_ntt_domain(e:encrypt_message(x, e:create_public_key(sk), { level = 2 }))
      local sq = e:relinearize(e:multiply(cx, cx), rlk)
      close(e:decrypt_message(sq, sk, { is_real = true }), x * x, 1e-4)
    end
  end)

  it("is part of the context's id, and round-trips through value files", function()
    local a, b = context { g = 5 }, context { g = 3 }
    local c = context { g = 5, max_level = 2 }
    local d = context { g = 5, digits = "below_p" }
    local ids = { a.id, b.id, c.id, d.id }
    for i = 1, #ids do
      for j = i + 1, #ids do assert.are_not.equal(ids[i], ids[j]) end
    end
    -- the defaults spelled out are the default context
    assert.equal(a, context { g = 5, max_level = 1, digits = "p_count" })
    local e = fh.CkksEngine(b)
    local pt = e:encode(fh.tensor({ 1, 2, 3 }), {})
    local bytes = fh.serialize(pt)
    assert.is_truthy(bytes:find('galois_generator\\":3', 1, true)) -- inside the header's JSON string
    assert.is_falsy(fh.serialize(fh.CkksEngine(a):encode(fh.tensor({ 1 }), {})):find("galois_generator", 1, true))
    local back = fh.deserialize(bytes)
    assert.equal(b, back.context)
    assert.is_true(back:equal(pt))
  end)

  it("refuses a file whose context records a bad generator, max_level or key_digits", function()
    local ctx = context { g = 3, max_level = 2, digits = "below_p" }
    local bytes = fh.serialize(fh.CkksEngine(ctx):encode(fh.tensor({ 1 }, { dtype = "float64" }), {}))
    local function edit(from, to)
      local n = 0
      for i = 8, 1, -1 do n = n * 256 + bytes:byte(i) end
      local text = bytes:sub(9, 8 + n):gsub(" +$", "")
      local i, j = text:find(from, 1, true)
      assert(i, from)
      text = text:sub(1, i - 1) .. to .. text:sub(j + 1)
      while #text % 8 ~= 0 do text = text .. " " end
      local len, l = {}, #text
      for k = 1, 8 do
        len[k] = string.char(l % 256)
        l = math.floor(l / 256)
      end
      return table.concat(len) .. text .. bytes:sub(9 + n)
    end
    H.expect_error("ValueError", { "corrupt value file", "galois_generator must be 5 or 3" }, fh.deserialize,
      edit('galois_generator\\":3', 'galois_generator\\":7'))
    H.expect_error("ValueError", { "corrupt value file", "max_level must be #q_primes %- 2 or #q_primes %- 1" },
      fh.deserialize, edit('max_level\\":2', 'max_level\\":0'))
    H.expect_error("ValueError", { "corrupt value file", "key_digits must be \"p_count\" or \"below_p\"" },
      fh.deserialize, edit('key_digits\\":\\"below_p', 'key_digits\\":\\"beyond'))
    H.expect_error("ValueError", { "corrupt value file", "optionally galois_generator, max_level, key_digits" },
      fh.deserialize, edit('key_digits\\":\\"below_p\\"', 'key_digits\\":2'))
    -- a generator the id does not hash: the id check refuses it
    H.expect_error("ValueError", { "corrupt value file", "do not hash to their id" }, fh.deserialize,
      edit('galois_generator\\":3', 'galois_generator\\":5'))
  end)

  it("rejects a bad generator, max_level or key_digits, naming the field", function()
    H.expect_error("ValueError", { "fh.CkksContext", "galois_generator must be 5 or 3", "got 7" }, context, { g = 7 })
    H.expect_error("ValueError", { "fh.CkksContext", "max_level must be #q_primes %- 2 = 1", "= 2", "got 0" },
      context, { max_level = 0 })
    H.expect_error("ValueError", { "fh.CkksContext", "key_digits must be \"p_count\" or \"below_p\"", "alpha" },
      context, { digits = "alpha" })
    H.expect_error("TypeError", { "fh.CkksContext", "key_digits expected a string" }, context, { digits = 2 })
  end)

  -- CUDA: the encode and decode kernels serve the generator-3 order (and the
  -- float64 coefficient input) bit for bit as the CPU's, small N and FHElium's preset
  for _, which in ipairs { "small", "preset" } do
    H.gpu_it(("CUDA encodes, decodes and rotates in the generator-3 order bit for bit as the CPU (%s)"):format(which),
      function()
        local ctx = which == "small" and context { g = 3, max_level = 2, digits = "below_p" }
          or fh.CkksContext(fh.Preset.slots8192_scale40_depth7_int64)
        local g = fh.Generator(seed + 4)
        local S = ctx.num_slots
        local z = complex_msg(g, S)
        local cpu, gpu = fh.CkksEngine(ctx, { seed = 9 }), fh.CkksEngine(ctx, { device = "cuda", seed = 9 })
        local pc, pg = cpu:encode(z), gpu:encode(z)
        assert.is_true(fh.equal(pc.data, pg.data:cpu()), "encode")
        assert.is_true(fh.equal(cpu:decode(pc), gpu:decode(pg):cpu()), "decode")
        local approx = fh.Plaintext { data = fh.randn({ 2 * S }, { generator = g, dtype = "float64" }) * 2 ^ 30,
          context = ctx, representation = "approximate_coefficients", scale = 2 ^ 30 }
        assert.is_true(fh.equal(cpu:decode(approx), gpu:decode(approx:cuda()):cpu()), "decode of float64 coefficients")
        local sk = cpu:create_secret_key()
        local skg = sk:cuda()
        local rk = cpu:create_rotation_key(sk, 3)
        local ck = cpu:create_conjugation_key(sk)
        local ct = cpu:encrypt(pc, cpu:create_public_key(sk))
        local rc, rg = cpu:rotate_with_key(ct, rk), gpu:rotate_with_key(ct:cuda(), rk:cuda())
        assert.is_true(fh.equal(rc.data, rg.data:cpu()), "rotation")
        assert.is_true(fh.equal(cpu:conjugate(ct, ck).data, gpu:conjugate(ct:cuda(), ck:cuda()).data:cpu()), "conjugation")
        assert.is_true(fh.equal(cpu:decrypt_message(rc, sk), gpu:decrypt_message(rg, skg):cpu()), "decrypt")
        close(cpu:decrypt_message(rc, sk), roll(z, 3))
      end)
  end
end)
