-- The CPU kernels' vector path (AVX-512 IFMA, fh.cpu_simd()) gives the scalar
-- kernels' words: NTTs, key-switching inner products and one-prime base
-- conversions for primes on both sides of its 2^50 limit, at N from 2^3, and
-- whole CKKS operations. Where the CPU lacks the instructions the comparison
-- cannot be made and the specs say so.
local fh = require "fhelium"
local H = require "spec.helpers"
local C = fh.core._ckks

local u64 = H.u64

local have = fh.cpu_simd() ~= "none"
local simd_it = have and it or function(name) H.skip_it(name, "the CPU has no AVX-512 IFMA (fh.cpu_simd() is \"none\")") end

-- fn() with the vector kernels on, then off; restores the setting
local function both(fn)
  local was = fh.cpu_simd()
  fh._set_cpu_simd(true)
  local ok1, v = pcall(fn)
  fh._set_cpu_simd(false)
  local ok2, s = pcall(fn)
  fh._set_cpu_simd(was ~= "none")
  assert(ok1, v)
  assert(ok2, s)
  return v, s
end

describe("CPU vector kernels", function()
  local seed = H.seed("ckks simd")

  it("report what runs: fh.cpu_simd() and fh.info().cpu_simd", function()
    assert.is_true(fh.cpu_simd() == "none" or fh.cpu_simd() == "avx512ifma")
    assert.equal(fh.cpu_simd(), fh.core.info().cpu_simd)
    assert.equal("none", fh._set_cpu_simd(false))
    assert.equal("none", fh.cpu_simd())
    fh._set_cpu_simd(true)
    assert.equal(have and "avx512ifma" or "none", fh.cpu_simd())
  end)

  it("can be turned off with FHELIUM_CPU_SIMD=0", function()
    local cli = require "spec.support.cli"
    local r = cli.run({ "-e", "io.write(require('fhelium').cpu_simd())" }, { env = { FHELIUM_CPU_SIMD = "0" } })
    assert.are.equal(0, r.code, r.stderr)
    assert.are.equal("none", r.stdout)
  end)

  it("refuse a non-boolean switch", function()
    H.expect_error("TypeError", "^fh%._set_cpu_simd: argument 1 %(on%) expected a boolean, got number",
      fh._set_cpu_simd, 1)
  end)

  simd_it("give the scalar NTT's words for 30- to 61-bit primes at N = 2^4 .. 2^16", function()
    for _, log_n in ipairs { 4, 5, 6, 8, 11, 14, 16 } do
      local primes = {}
      for _, bits in ipairs { 30, 40, 49, 50, 51, 60, 61 } do
        for _, p in ipairs(C.find_primes(bits, log_n, 1):tolist()) do primes[#primes + 1] = p end
      end
      local n = 2 ^ log_n
      local tb = C.tables(log_n, u64(primes), #primes)
      local ids = {}
      local t = fh.empty({ 2, #primes, n }, { dtype = "uint64" })
      for g = 1, 2 do
        for i, q in ipairs(primes) do
          ids[i] = i - 1
          t:select(1, g):select(1, i):copy_(C.sample("uniform", n, { q = q, seed = seed + 10 * log_n + i + 100 * g }))
        end
      end
      local fv, fs = both(function() return C.ntt(tb, t, ids) end)
      assert.is_true(fh.equal(fv, fs), ("forward, N = 2^%d"):format(log_n))
      local iv, is = both(function() return C.intt(tb, fs, ids) end)
      assert.is_true(fh.equal(iv, is), ("inverse, N = 2^%d"):format(log_n))
      assert.is_true(fh.equal(is, t), ("round trip, N = 2^%d"):format(log_n))
      -- inputs at the top of the range: q - 1 everywhere, and in place
      local top = fh.empty({ #primes, n }, { dtype = "uint64" })
      for i, q in ipairs(primes) do top:select(1, i):fill_(q - 1) end
      local tv, ts = both(function() return C.intt(tb, C.ntt(tb, top, ids), ids) end)
      assert.is_true(fh.equal(tv, ts))
      assert.is_true(fh.equal(tv, top))
    end
  end)

  simd_it("give the scalar key-switching inner product for 1 to 17 digits and 30- to 61-bit primes", function()
    for _, log_n in ipairs { 3, 5, 12 } do
      local primes = {}
      for _, bits in ipairs { 30, 40, 49, 50, 60 } do
        for _, p in ipairs(C.find_primes(bits, log_n, 1):tolist()) do primes[#primes + 1] = p end
      end
      local n = 2 ^ log_n
      local tb = C.tables(log_n, u64(primes), #primes - 1)
      local ids, rows = {}, {}
      for i = 1, #primes do ids[i], rows[i] = i - 1, i - 1 end
      for _, D in ipairs { 1, 3, 8, 9, 17 } do
        -- digits [G=2][D][limbs][N], key [D][2][limbs][N]: uniform, and every word q - 1 (the largest sums)
        for _, extreme in ipairs { false, true } do
          local digits = fh.empty({ 2, D, #primes, n }, { dtype = "uint64" })
          local key = fh.empty({ D, 2, #primes, n }, { dtype = "uint64" })
          local k = 0
          for a = 1, 2 do
            for b = 1, D do
              for i, q in ipairs(primes) do
                k = k + 1
                local dr, kr = digits:select(1, a):select(1, b):select(1, i), key:select(1, b):select(1, a):select(1, i)
                if extreme then
                  dr:fill_(q - 1)
                  kr:fill_(q - 1)
                else
                  dr:copy_(C.sample("uniform", n, { q = q, seed = seed + 1000 * D + k }))
                  kr:copy_(C.sample("uniform", n, { q = q, seed = seed + 1000 * D + k + 500 }))
                end
              end
            end
          end
          local v, sc = both(function() return C.ks_inner(tb, digits, key, ids, rows) end)
          assert.is_true(fh.equal(v, sc), ("N = 2^%d, %d digits%s"):format(log_n, D, extreme and ", q - 1" or ""))
        end
      end
    end
  end)

  simd_it("give the scalar base conversion from one source prime, centred or not, into smaller and larger primes", function()
    for _, log_n in ipairs { 3, 5, 11 } do
      local primes = {}
      for _, bits in ipairs { 30, 40, 49, 50, 51, 60 } do
        for _, p in ipairs(C.find_primes(bits, log_n, 1):tolist()) do primes[#primes + 1] = p end
      end
      local n = 2 ^ log_n
      local tb = C.tables(log_n, u64(primes), #primes)
      for src = 1, #primes do
        local x = fh.empty({ 3, 1, n }, { dtype = "uint64" })
        x:select(1, 1):select(1, 1):copy_(C.sample("uniform", n, { q = primes[src], seed = seed + 7 * src + log_n }))
        x:select(1, 2):select(1, 1):fill_(primes[src] - 1)
        x:select(1, 3):select(1, 1):fill_(math.floor(tonumber(primes[src]) / 2)) -- near the centring threshold
        local dst = {}
        for t = 1, #primes do if t ~= src then dst[#dst + 1] = t - 1 end end
        for _, center in ipairs { true, false } do
          local v, sc = both(function() return C.bconv(tb, x, { src - 1 }, dst, center) end)
          assert.is_true(fh.equal(v, sc), ("N = 2^%d, source prime %d, centre %s"):format(log_n, src, tostring(center)))
        end
      end
    end
  end)

  simd_it("give the scalar engine's ciphertexts for relinearization, rotations, rescaling and linear transforms", function()
    local s = H.seed("ckks simd engine")
    local function run()
      local e = fh.CkksEngine(fh.Preset.slots8192_scale40_levels7_int64, { seed = s })
      local sk = e:create_secret_key()
      local pk = e:create_public_key(sk)
      local rlk = e:create_relinearization_key(sk)
      e:create_rotation_key(sk, 3)
      local m = fh.rand({ e.context.num_slots }, { dtype = "float64", generator = fh.Generator(s) })
      local x = e:coefficient_domain_to_ntt_domain(e:encrypt_message(m, pk))
      local p = e:rescale_to_next_level(e:relinearize(e:multiply(x, x), rlk))
      local r = e:rotate_by_step(p, 3)
      -- a linear transform (vector inner products of gathered chunks), steps 0 and 3
      local d1 = e:prepare_plaintext_for_multiplication(e:encode(m, { basis = "QP" }))
      local d2 = e:prepare_plaintext_for_multiplication(e:encode(m * 0.5, { basis = "QP" }))
      local lt = e:linear_transform(x, { 0, 3, 3 }, { d1, d2, d1 })
      return { x.data, p.data, r.data, e:decrypt_message(r, sk), lt.data }
    end
    local v, sc = both(run)
    for i = 1, 5 do assert.is_true(fh.equal(v[i], sc[i]), ("result %d"):format(i)) end
  end)
end)
