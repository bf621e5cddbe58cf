-- CKKS arithmetic core (phase 1): modular arithmetic, NTT, automorphisms,
-- encoding and sampling through the internal test binding core._ckks
-- (0-based prime ids). References are computed here in plain Lua with
-- uint64 cdata, independently of the C code.
local fh = require "fhelium"
local H = require "spec.helpers"
local bit = require "bit"
local C = fh.core._ckks

-- ---- Lua references -------------------------------------------------------
local function addmod(a, b, q)
  local s = a + b
  if s >= q then s = s - q end
  return s
end
local function submod(a, b, q) return a >= b and a - b or a + q - b end
local mulmod, powmod = H.mulmod, H.powmod
local function r_mod(q) return mulmod(0x8000000000000000ULL % q, 2ULL, q) end -- 2^64 mod q
local function bitrev(x, bits)
  local r = 0
  for _ = 1, bits do
    r = r * 2 + x % 2
    x = math.floor(x / 2)
  end
  return r
end

local function u64(t, n) return fh.tensor(t, { dtype = "uint64" }):view(n) end
local function rows(t) return t:tolist() end

local function random_residues(q, n, seed)
  return C.sample("uniform", n, { q = q, seed = seed })
end

describe("ckks modular arithmetic", function()
  local seed = H.seed("ckks modarith")
  local primes = {}
  for _, bits in ipairs { 30, 40, 50, 60, 61 } do
    for _, p in ipairs(C.find_primes(bits, 4, 1):tolist()) do primes[#primes + 1] = p end
  end
  local tb = C.tables(4, u64(primes, #primes), #primes)

  it("finds NTT-friendly primes: prime, = 1 mod 2N, below 2^bits, descending", function()
    for _, bits in ipairs { 30, 40, 50, 60 } do
      for _, log_n in ipairs { 10, 13, 16 } do
        local ps = C.find_primes(bits, log_n, 3):tolist()
        assert.equal(3, #ps)
        for i, p in ipairs(ps) do
          assert.is_true(C.is_prime(p))
          assert.equal(1ULL, p % (2ULL ^ (log_n + 1)))
          assert.is_true(p < bit.lshift(1ULL, bits) and p > bit.lshift(1ULL, bits - 1))
          if i > 1 then assert.is_true(p < ps[i - 1]) end
        end
      end
    end
    assert.is_false(C.is_prime(1ULL))
    assert.is_false(C.is_prime(3215031751ULL)) -- a strong pseudoprime to bases 2, 3, 5, 7
    assert.is_true(C.is_prime(2305843009213693951ULL)) -- 2^61 - 1
  end)

  it("converts to and from Montgomery form exactly", function()
    local n = 16
    for id, q in ipairs(primes) do
      local vals = random_residues(q, n - 4, seed + id):tolist()
      vals[#vals + 1] = 0ULL
      vals[#vals + 1] = 1ULL
      vals[#vals + 1] = q - 1ULL
      vals[#vals + 1] = q - 2ULL
      local a = u64(vals, { 1, n })
      local m = C.ew(tb, "to_mont", { id - 1 }, a)
      local R = r_mod(q)
      local ml = rows(m)[1]
      for j = 1, n do assert.equal(mulmod(vals[j], R, q), ml[j]) end
      assert.is_true(fh.equal(C.ew(tb, "from_mont", { id - 1 }, m), a))
    end
  end)

  it("multiplies Montgomery residues: MM(a, b) = a b R^-1 mod q", function()
    local n = 16
    for id, q in ipairs(primes) do
      local a = random_residues(q, n, seed + 100 + id)
      local b = random_residues(q, n, seed + 200 + id)
      local rinv = powmod(r_mod(q), q - 2ULL, q)
      local got = rows(C.ew(tb, "mont_mul", { id - 1 }, a:view({ 1, n }), b:view({ 1, n })))[1]
      local al, bl = a:tolist(), b:tolist()
      for j = 1, n do assert.equal(mulmod(mulmod(al[j], bl[j], q), rinv, q), got[j]) end
      -- Montgomery forms multiply to the Montgomery form of the product
      local am = C.ew(tb, "to_mont", { id - 1 }, a:view({ 1, n }))
      local bm = C.ew(tb, "to_mont", { id - 1 }, b:view({ 1, n }))
      local prod = C.ew(tb, "from_mont", { id - 1 }, C.ew(tb, "mont_mul", { id - 1 }, am, bm))
      local pl = prod:tolist()[1]
      for j = 1, n do assert.equal(mulmod(al[j], bl[j], q), pl[j]) end
    end
  end)

  it("multiplies by constants with Shoup's method", function()
    local n = 16
    local ids, consts = {}, {}
    for id, q in ipairs(primes) do
      for r = 1, 4 do
        ids[#ids + 1] = id - 1
        consts[#consts + 1] = ({ 0ULL, 1ULL, q - 1ULL, random_residues(q, 1, seed + 7 * id):tolist()[1] })[r]
      end
    end
    local data = {}
    for i, id in ipairs(ids) do
      data[i] = random_residues(primes[id + 1], n, seed + 300 + i):tolist()
      data[i][1] = primes[id + 1] - 1ULL
    end
    local a = fh.tensor(data, { dtype = "uint64" })
    local got = rows(C.ew(tb, "mul_const", ids, a, nil, nil, { c = u64(consts, #consts) }))
    for i, id in ipairs(ids) do
      local q = primes[id + 1]
      for j = 1, n do assert.equal(mulmod(data[i][j], consts[i], q), got[i][j]) end
    end
  end)

  it("adds, subtracts, negates and reduces signed values per limb", function()
    local n = 16
    local ids = { 0, 1, 2, 3, 4 }
    local a, b = {}, {}
    for i, q in ipairs(primes) do
      a[i] = random_residues(q, n, seed + 400 + i):tolist()
      b[i] = random_residues(q, n, seed + 500 + i):tolist()
      b[i][1] = q - 1ULL
      a[i][2] = 0ULL
    end
    local ta, tb_ = fh.tensor(a, { dtype = "uint64" }), fh.tensor(b, { dtype = "uint64" })
    local sum = rows(C.ew(tb, "add", ids, ta, tb_))
    local dif = rows(C.ew(tb, "sub", ids, ta, tb_))
    local neg = rows(C.ew(tb, "neg", ids, ta))
    for i, q in ipairs(primes) do
      for j = 1, n do
        assert.equal(addmod(a[i][j], b[i][j], q), sum[i][j])
        assert.equal(submod(a[i][j], b[i][j], q), dif[i][j])
        assert.equal(submod(0ULL, a[i][j], q), neg[i][j])
      end
    end
    local s = fh.tensor({ -3, -1, 0, 1, 2, 19, -19, 7, 0, 0, 0, 0, 0, 0, 0, -8 }, { dtype = "int64" })
    local red = rows(C.ew(tb, "signed", ids, s))
    for i, q in ipairs(primes) do
      for j, v in ipairs(s:tolist()) do
        assert.equal(v < 0 and q - fh.tensor({ -v }, { dtype = "uint64" }):tolist()[1] or fh.tensor({ v }, { dtype = "uint64" }):tolist()[1], red[i][j])
      end
    end
  end)
end)

describe("ckks negacyclic NTT", function()
  local seed = H.seed("ckks ntt")

  it("round-trips random inputs for 30/40/50/60-bit primes at several N", function()
    for _, log_n in ipairs { 1, 2, 3, 4, 10, 12, 13 } do
      local primes = {}
      for _, bits in ipairs { 30, 40, 50, 60 } do
        for _, p in ipairs(C.find_primes(bits, log_n, 2):tolist()) do primes[#primes + 1] = p end
      end
      local tb = C.tables(log_n, u64(primes, #primes), #primes)
      local n = 2 ^ log_n
      local data, ids = {}, {}
      for i, q in ipairs(primes) do
        data[i] = random_residues(q, n, seed + log_n * 100 + i)
        ids[i] = i - 1
      end
      -- two groups: [2, limbs, N]
      local one = fh.zeros({ #primes, n }, { dtype = "uint64" })
      for i = 1, #primes do one:select(1, i):copy_(data[i]) end
      local t = fh.zeros({ 2, #primes, n }, { dtype = "uint64" })
      t:select(1, 1):copy_(one)
      t:select(1, 2):copy_(C.ew(tb, "neg", ids, one))
      local f = C.ntt(tb, t, ids)
      assert.is_false(fh.equal(f, t))
      -- NTT outputs are reduced
      local fl = f:tolist()
      for g = 1, 2 do
        for i, q in ipairs(primes) do
          for j = 1, n, math.max(1, n / 64) do assert.is_true(fl[g][i][j] < q) end
        end
      end
      assert.is_true(fh.equal(C.intt(tb, f, ids), t))
    end
  end)

  -- Every preset prime: at the preset's own N for 8192 and 16384 slots, and
  -- for 32768 and 65536 slots with FHELIUM_SLOW=1 (otherwise at N = 2^12:
  -- a prime = 1 mod 2N is NTT-friendly for every smaller power of two too).
  it("round-trips random inputs for every preset prime", function()
    local slow = os.getenv("FHELIUM_SLOW") == "1"
    for _, p in ipairs(fh.core.ckks_presets()) do
      local ctx = fh.CkksContext(p.name)
      local primes = ctx.primes
      local log_n = math.floor(math.log(p.ring_degree) / math.log(2) + 0.5)
      if log_n > 15 and not slow then log_n = 12 end
      local n = 2 ^ log_n
      local tb = C.tables(log_n, u64(primes, #primes), ctx.num_q_primes)
      local ids = {}
      local t = fh.zeros({ #primes, n }, { dtype = "uint64" })
      for i, q in ipairs(primes) do
        ids[i] = i - 1
        t:select(1, i):copy_(random_residues(q, n, seed + i))
      end
      local f = C.ntt(tb, t, ids)
      assert.is_false(fh.equal(f, t))
      assert.is_true(fh.equal(C.intt(tb, f, ids), t), p.name)
    end
  end)

  local function setup(log_n)
    local primes = { C.find_primes(40, log_n, 1):tolist()[1], C.find_primes(60, log_n, 1):tolist()[1] }
    return primes, C.tables(log_n, u64(primes, 2), 2)
  end

  for _, log_n in ipairs { 4, 5 } do
    it(("matches a direct O(N^2) negacyclic convolution (N=%d)"):format(2 ^ log_n), function()
      local primes, tb = setup(log_n)
      local n = 2 ^ log_n
      for id, q in ipairs(primes) do
        local a = random_residues(q, n, seed + 10 * id + log_n):view({ 1, n })
        local b = random_residues(q, n, seed + 20 * id + log_n):view({ 1, n })
        local prod = C.intt(tb, C.ew(tb, "mont_mul", { id - 1 }, C.ntt(tb, a, { id - 1 }), C.ntt(tb, b, { id - 1 })),
          { id - 1 })
        local al, bl = a:tolist()[1], b:tolist()[1]
        local want = {}
        for k = 1, n do want[k] = 0ULL end
        for i = 0, n - 1 do
          for j = 0, n - 1 do
            local p = mulmod(al[i + 1], bl[j + 1], q)
            local k = i + j
            if k < n then want[k + 1] = addmod(want[k + 1], p, q)
            else want[k - n + 1] = submod(want[k - n + 1], p, q) end
          end
        end
        assert.same(want, prod:tolist()[1])
      end
    end)
  end

  it("evaluates at psi^(2 bitrev(i) + 1), in Montgomery form", function()
    local log_n = 4
    local primes, tb = setup(log_n)
    local n = 2 ^ log_n
    for id, q in ipairs(primes) do
      local info = tb:prime(id - 1):tolist()
      assert.equal(q, info[1])
      local psi = info[2]
      assert.equal(q - 1ULL, powmod(psi, n, q)) -- primitive 2N-th root: psi^N = -1
      local a = random_residues(q, n, seed + 77 + id)
      local got = C.ntt(tb, a:view({ 1, n }), { id - 1 }):tolist()[1]
      local al = a:tolist()
      local R = r_mod(q)
      for s = 0, n - 1 do
        local x = powmod(psi, 2 * bitrev(s, log_n) + 1, q)
        local v = 0ULL
        for j = n, 1, -1 do v = addmod(mulmod(v, x, q), al[j], q) end
        assert.equal(mulmod(v, R, q), got[s + 1])
      end
    end
  end)
end)

describe("ckks automorphisms", function()
  local seed = H.seed("ckks automorph")
  local log_n = 5
  local n = 2 ^ log_n
  local primes = C.find_primes(50, log_n, 2):tolist()
  local tb = C.tables(log_n, u64(primes, 2), 2)

  local function reference(rows_, g)
    local out = {}
    for l, q in ipairs(primes) do
      out[l] = {}
      for i = 0, n - 1 do
        local e = (i * g) % (2 * n)
        local v = rows_[l][i + 1]
        if e < n then out[l][e + 1] = v else out[l][e - n + 1] = submod(0ULL, v, q) end
      end
    end
    return out
  end

  it("maps X to X^g in the coefficient domain and agrees with the NTT-domain permutation", function()
    local t = fh.zeros({ 2, n }, { dtype = "uint64" })
    for l, q in ipairs(primes) do t:select(1, l):copy_(random_residues(q, n, seed + l)) end
    for _, g in ipairs { 5, 25, 125 % (2 * n), 2 * n - 1, 3, 2 * n - 5 } do
      local c = C.automorph(tb, t, { 0, 1 }, g, false)
      assert.same(reference(t:tolist(), g), c:tolist())
      local viantt = C.automorph(tb, C.ntt(tb, t, { 0, 1 }), { 0, 1 }, g, true)
      assert.is_true(fh.equal(viantt, C.ntt(tb, c, { 0, 1 })))
    end
  end)

  -- a warp's gathers of the digits in the CUDA linear transform's sum and rotate_many's inner
  -- product (32 slots) stay in one aligned 256-byte run, so they coalesce like the key's reads:
  -- every aligned block of 2^b slots reads one aligned block of 2^b slots
  it("maps aligned blocks of 2^b slots onto aligned blocks of 2^b slots in the NTT domain", function()
    for _, lg in ipairs { log_n, 10 } do
      local m = 2 ^ lg
      local tbm = lg == log_n and tb or C.tables(lg, u64(C.find_primes(50, lg, 1):tolist(), 1), 1)
      local idx = {}
      for j = 0, m - 1 do idx[j + 1] = j end
      local t = fh.tensor({ idx }, { dtype = "uint64" })
      for _, g in ipairs { 5, 25, 2 * m - 1, 3, 2 * m - 5, (5 ^ 7) % (2 * m) } do
        local src = C.automorph(tbm, t, { 0 }, g, true):tolist()[1] -- slot i reads slot src[i + 1]
        for b = 1, math.min(6, lg - 1) do
          local size = 2 ^ b
          local seen, count = {}, 0
          for i0 = 0, m - 1, size do
            local blk = math.floor(tonumber(src[i0 + 1]) / size)
            for i = i0, i0 + size - 1 do
              assert.equal(blk, math.floor(tonumber(src[i + 1]) / size),
                ("g = %d, N = %d, block of %d at %d, slot %d"):format(g, m, size, i0, i))
            end
            if not seen[blk] then count = count + 1 end
            seen[blk] = true
          end
          assert.equal(m / size, count) -- a permutation of the blocks
        end
      end
    end
  end)

  it("rejects even Galois elements", function()
    local t = fh.zeros({ 2, n }, { dtype = "uint64" })
    H.expect_error("ValueError", "must be odd", C.automorph, tb, t, { 0, 1 }, 4, false)
  end)
end)

describe("ckks encoding", function()
  local seed = H.seed("ckks encoding")

  it("decodes by evaluating m at zeta^(5^j) (direct evaluation, N=16)", function()
    local log_n = 4
    local n = 2 ^ log_n
    local primes = C.find_primes(50, log_n, 2):tolist()
    local tb = C.tables(log_n, u64(primes, 2), 2)
    local g = fh.Generator(seed)
    local coeffs = {}
    for i = 1, n do coeffs[i] = math.floor(fh.rand({ 1 }, { generator = g, dtype = "float64" }):item() * 2001) - 1000 end
    local signed = fh.tensor(coeffs, { dtype = "int64" })
    local rns = C.ew(tb, "signed", { 0, 1 }, signed):view({ 1, 2, n })
    local z = C.decode(tb, rns, 1.0, true):tolist()[1]
    for j = 0, n / 2 - 1 do
      local e = 1
      for _ = 1, j do e = (e * 5) % (2 * n) end
      local re, im = 0, 0
      for i = 0, n - 1 do
        local ang = math.pi * e * i / n
        re = re + coeffs[i + 1] * math.cos(ang)
        im = im + coeffs[i + 1] * math.sin(ang)
      end
      assert.is_true(math.abs(z[j + 1][1] - re) < 1e-9 and math.abs(z[j + 1][2] - im) < 1e-9,
        ("slot %d: got (%g, %g), want (%g, %g)"):format(j, z[j + 1][1], z[j + 1][2], re, im))
    end
  end)

  local function rel_err(a, b)
    local d = fh.max_abs_diff(a, b)
    local m = fh.max_abs_diff(b, fh.zeros(b.shape, { dtype = b.dtype }))
    return d / m
  end

  it("round-trips complex and real messages below 1e-9 relative error at scale 2^40 over every level's rows (suffixes of the chain)", function()
    local log_n = 10
    local primes = C.find_primes(40, log_n, 4):tolist()
    primes[#primes + 1] = C.find_primes(60, log_n, 1):tolist()[1] -- the base prime, last
    local tb = C.tables(log_n, u64(primes, #primes), #primes)
    local g = fh.Generator(seed)
    local z = fh.randn({ 3, 512 }, { generator = g, dtype = "float64" })
    local zc = fh.tensor(z, { dtype = "complex128" }) + fh.tensor(fh.randn({ 3, 512 }, { generator = g, dtype = "float64" }), { dtype = "complex128" }) * fh.tensor({ { 0, 1 } }, { dtype = "complex128" })
    for nl = 1, #primes do
      local scale = 2 ^ 40
      local ec = C.encode(tb, zc, scale, nl)
      assert.same({ 3, nl, 2 ^ log_n }, ec.shape)
      assert.is_true(rel_err(C.decode(tb, ec, scale, true), zc) < 1e-9)
      local er = C.decode(tb, C.encode(tb, z, scale, nl), scale, false)
      assert.equal("float64", er.dtype)
      assert.is_true(rel_err(er, z) < 1e-9)
    end
  end)

  it("encodes values whose scaled size exceeds 2^63 exactly (three 60-bit primes, scale 2^50)", function()
    local log_n = 6
    local primes = C.find_primes(60, log_n, 3):tolist()
    local tb = C.tables(log_n, u64(primes, 3), 3)
    local g = fh.Generator(seed + 1)
    local z = fh.randn({ 32 }, { generator = g, dtype = "float64" }) * (2 ^ 20)
    local d = C.decode(tb, C.encode(tb, z, 2 ^ 50, 3), 2 ^ 50, false)
    assert.is_true(rel_err(d, z) < 1e-12)
  end)

  it("decodes values beyond 128 bits exactly (multi-word CRT path)", function()
    local log_n = 5
    local primes = C.find_primes(60, log_n, 4):tolist()
    local tb = C.tables(log_n, u64(primes, 4), 4)
    local g = fh.Generator(seed + 2)
    local z = fh.randn({ 16 }, { generator = g, dtype = "float64" }) * (2 ^ 90)
    -- 4 limbs: coefficients ~2^130, beyond the 128-bit fast path; 3 limbs: ~2^100, inside it
    for _, case in ipairs { { 4, z }, { 3, z * 2 ^ -30 } } do
      local d = C.decode(tb, C.encode(tb, case[2], 2 ^ 40, case[1]), 2 ^ 40, false)
      assert.is_true(rel_err(d, case[2]) < 1e-12, "limbs " .. case[1])
    end
  end)

  it("zero-pads short messages and rejects oversized, non-finite or too-large ones", function()
    local log_n = 5
    local primes = C.find_primes(40, log_n, 2):tolist()
    local tb = C.tables(log_n, u64(primes, 2), 2)
    local d = C.decode(tb, C.encode(tb, fh.tensor({ 1, 2, 3 }, { dtype = "float64" }), 2 ^ 30, 2), 2 ^ 30, false)
    assert.same({ 16 }, d.shape)
    local dl = d:tolist()
    for j = 1, 16 do assert.is_true(math.abs(dl[j] - (({ 1, 2, 3 })[j] or 0)) < 1e-6) end
    H.expect_error("ValueError", "17 message slots given but the context has 16", C.encode, tb,
      fh.zeros({ 17 }, { dtype = "float64" }), 2 ^ 30, 2)
    H.expect_error("ValueError", "not finite", C.encode, tb, fh.tensor({ 1, 0 / 0 }, { dtype = "float64" }), 2 ^ 30, 2)
    H.expect_error("ValueError", "would wrap around", C.encode, tb, fh.tensor({ 2 ^ 60 }, { dtype = "float64" }), 2 ^ 30, 2)
    H.expect_error("TypeError", "float64 or complex128", C.encode, tb, fh.zeros({ 4 }), 2 ^ 30, 2)
  end)
end)

describe("ckks sampling", function()
  it("draws ternary values uniformly from {-1, 0, 1}", function()
    local n = 30000
    local t = C.sample("ternary", n):tolist()
    local c = { [-1] = 0, [0] = 0, [1] = 0 }
    for _, v in ipairs(t) do
      local k = tonumber(v)
      assert.is_not_nil(c[k])
      c[k] = c[k] + 1
    end
    for _, k in ipairs { -1, 0, 1 } do assert.is_true(math.abs(c[k] / n - 1 / 3) < 0.02) end
  end)

  it("draws centred Gaussian errors with sigma 3.2 and |x| <= 19", function()
    local n = 40000
    local t = C.sample("gaussian", n):tolist()
    local s, s2, mx = 0, 0, 0
    for _, v in ipairs(t) do
      local x = tonumber(v)
      s = s + x
      s2 = s2 + x * x
      mx = math.max(mx, math.abs(x))
    end
    local mean, var = s / n, s2 / n - (s / n) ^ 2
    assert.is_true(math.abs(mean) < 0.1, "mean " .. mean)
    assert.is_true(math.abs(var - 3.2 ^ 2) < 0.4, "variance " .. var)
    assert.is_true(mx <= 19)
  end)

  it("draws uniform residues below q without bias", function()
    local q = 1099511627297ULL
    local n = 20000
    local t = C.sample("uniform", n, { q = q }):tolist()
    local below = 0
    for _, v in ipairs(t) do
      assert.is_true(v < q)
      if v < q / 2ULL then below = below + 1 end
    end
    assert.is_true(math.abs(below / n - 0.5) < 0.02)
  end)

  it("computes runs of ternary and Gaussian rows as the host samplers draw them (FH_K_CKKS_SAMPLE)", function()
    -- the kernel takes a reserved run of the stream: the same words, the same rows, and the stream
    -- continues after them; skips put the run across the generator's 512-word buffers
    for _, log_n in ipairs { 1, 6, 10 } do
      local tb = C.tables(log_n, fh.tensor(C.find_primes(40, log_n, 1):tolist(), { dtype = "uint64" }), 1)
      for _, skip in ipairs { 0, 3, 500, 511, 512, 1000 } do
        for _, rows in ipairs { { 1, 0 }, { 0, 1 }, { 2, 3 } } do
          local a, na = C.sample_run(tb, rows[1], rows[2], { seed = 7 + skip, skip = skip })
          local b, nb = C.sample_run(tb, rows[1], rows[2], { seed = 7 + skip, skip = skip, sequential = true })
          local what = ("N=2^%d, %d ternary and %d Gaussian rows after %d words"):format(log_n, rows[1], rows[2], skip)
          assert.is_true(fh.equal(a, b), what)
          assert.is_true(fh.equal(na, nb), what .. ": the stream's next word")
        end
      end
    end
  end)

  it("is deterministic with a seed and differs without", function()
    local a = C.sample("gaussian", 64, { seed = 42 })
    assert.is_true(fh.equal(a, C.sample("gaussian", 64, { seed = 42 })))
    assert.is_false(fh.equal(a, C.sample("gaussian", 64, { seed = 43 })))
    assert.is_false(fh.equal(C.sample("uniform", 64, { q = 2ULL ^ 61 }), C.sample("uniform", 64, { q = 2ULL ^ 61 })))
  end)
end)
