-- The polynomial test entries (core._ckks: tensor, bconv, ks_inner, modup) and
-- strided groups, on the CPU: each kernel against a composition of simpler
-- ones. The same entries on CUDA are compared with these in
-- ckks_cuda_spec.lua.
local fh = require "fhelium"
local H = require "spec.helpers"
local C = fh.core._ckks

local u64 = H.u64

local residues = H.residues

describe("ckks polynomial entries (CPU)", function()
  local seed = H.seed("ckks poly")
  local log_n, n = 5, 32
  local qs = C.find_primes(40, log_n, 3):tolist()
  local ps = C.find_primes(60, log_n, 2):tolist()
  local primes = { qs[1], qs[2], qs[3], ps[1], ps[2] }
  -- 3 Q primes, 2 P primes: alpha = 2, dnum = 2
  local tb = C.tables(log_n, u64(primes), 3)
  local ids = { 0, 1, 2, 3, 4 }

  it("the tensor product is the three Montgomery products", function()
    local a, b = residues({ 2, 3 }, primes, n, seed), residues({ 2, 3 }, primes, n, seed + 100)
    local d = C.tensor(tb, a, b, ids)
    assert.are.same({ 3, 3, 5, n }, d.shape)
    local a0, a1, b0, b1 = a:select(1, 1), a:select(1, 2), b:select(1, 1), b:select(1, 2)
    assert.is_true(fh.equal(d:select(1, 1), C.ew(tb, "mont_mul", ids, a0, b0)))
    assert.is_true(fh.equal(d:select(1, 3), C.ew(tb, "mont_mul", ids, a1, b1)))
    assert.is_true(fh.equal(d:select(1, 2),
      C.ew(tb, "add", ids, C.ew(tb, "mont_mul", ids, a0, b1), C.ew(tb, "mont_mul", ids, a1, b0))))
    H.expect_error("ValueError", "different shapes", C.tensor, tb, a, b:narrow(2, 1, 2), ids)
    H.expect_error("ValueError", "2 components", C.tensor, tb, a:narrow(1, 1, 1), b:narrow(1, 1, 1), ids)
  end)

  it("the key-switching inner product is a sum of Montgomery products", function()
    local D = 3
    local digits, key = residues({ 2, D }, primes, n, seed + 200), residues({ D, 2 }, primes, n, seed + 300)
    local out = C.ks_inner(tb, digits, key, ids, { 0, 1, 2, 3, 4 })
    assert.are.same({ 2, 2, 5, n }, out.shape)
    for g = 1, 2 do
      for c = 1, 2 do
        local acc
        for d = 1, D do
          local p = C.ew(tb, "mont_mul", ids, digits:select(1, g):select(1, d), key:select(1, d):select(1, c))
          acc = acc and C.ew(tb, "add", ids, acc, p) or p
        end
        assert.is_true(fh.equal(out:select(1, g):select(1, c), acc), ("group %d component %d"):format(g, c))
      end
    end
    -- galois: the digits read through the NTT-domain automorphism, the same words as
    -- permuting them first (FH_K_CKKS_AUTOMORPH) and taking the plain inner product
    for _, gal in ipairs { 5, 3, 2 * n - 1 } do
      assert.is_true(fh.equal(C.ks_inner(tb, digits, key, ids, { 0, 1, 2, 3, 4 }, gal),
        C.ks_inner(tb, C.automorph(tb, digits, ids, gal, true), key, ids, { 0, 1, 2, 3, 4 })), "galois " .. gal)
    end
    assert.is_true(fh.equal(C.ks_inner(tb, digits, key, ids, { 0, 1, 2, 3, 4 }, 1), out), "galois 1 is none")
    H.expect_error("ValueError", "ckks ks_inner: the Galois element must be odd and below 2N = " .. 2 * n .. ", got 4",
      C.ks_inner, tb, digits, key, ids, { 0, 1, 2, 3, 4 }, 4)
    H.expect_error("ValueError", "got " .. 2 * n + 1, C.ks_inner, tb, digits, key, ids, { 0, 1, 2, 3, 4 }, 2 * n + 1)
    -- steps (a list of Galois elements): one launch, slice s the product of element s
    local gals = { 5, 1, 2 * n - 1, 3 }
    local steps = C.ks_inner(tb, digits, key, ids, { 0, 1, 2, 3, 4 }, gals)
    assert.are.same({ 4, 2, 2, 5, n }, steps.shape)
    for s, gal in ipairs(gals) do
      assert.is_true(fh.equal(steps:select(1, s), C.ks_inner(tb, digits, key, ids, { 0, 1, 2, 3, 4 }, gal)),
        "step " .. s)
    end
    local eight = {}
    for _, g in ipairs { 5, 25, 125, 3, 9, 27, 81, 2 * n - 1 } do eight[#eight + 1] = g % (2 * n) end
    assert.are.same({ 8, 2, 2, 5, n }, C.ks_inner(tb, digits, key, ids, { 0, 1, 2, 3, 4 }, eight).shape)
    H.expect_error("ValueError", "_ckks.ks_inner: galois expected a list of 1 to 8 elements, got 0", C.ks_inner, tb,
      digits, key, ids, { 0, 1, 2, 3, 4 }, {})
    H.expect_error("ValueError", "_ckks.ks_inner: galois expected a list of 1 to 8 elements, got 9", C.ks_inner, tb,
      digits, key, ids, { 0, 1, 2, 3, 4 }, { 5, 25, 125, 3, 9, 27, 81, 1, 1 })
    H.expect_error("ValueError", "ckks ks_inner: the Galois element must be odd and below 2N = " .. 2 * n .. ", got 6",
      C.ks_inner, tb, digits, key, ids, { 0, 1, 2, 3, 4 }, { 5, 6 })
    H.expect_error("TypeError", "_ckks.ks_inner: galois%[i%] expected an integer or uint64 cdata, got string",
      C.ks_inner, tb, digits, key, ids, { 0, 1, 2, 3, 4 }, { 5, "x" })
    H.expect_error("ValueError", "key row 5 is out of range", C.ks_inner, tb, digits, key, ids, { 0, 1, 2, 3, 5 })
    H.expect_error("ValueError", "key expected shape", C.ks_inner, tb, digits, key:narrow(1, 1, 2), ids,
      { 0, 1, 2, 3, 4 })
  end)

  it("a centered conversion from one prime is the centred residue", function()
    local x = residues({ 2 }, { qs[1] }, n, seed + 400)
    local y = C.bconv(tb, x, { 0 }, { 1, 3 }, true)
    local plain = C.bconv(tb, x, { 0 }, { 1, 3 }, false)
    local xv, yv, pv = x:tolist(), y:tolist(), plain:tolist()
    for g = 1, 2 do
      for j = 1, n do
        local v = xv[g][1][j]
        for k, t in ipairs { qs[2], ps[1] } do
          assert.are.equal(v % t, pv[g][k][j])
          local want = v > qs[1] / 2 and (v + t - qs[1] % t) % t or v % t
          assert.are.equal(want, yv[g][k][j])
        end
      end
    end
    H.expect_error("ValueError", "appears twice", C.bconv, tb, residues({ 1 }, { qs[1], qs[1] }, n, 1), { 0, 0 },
      { 1 }, true)
  end)

  it("the mod-up copies each digit's rows and converts them to every other row", function()
    for level = 0, 2 do
      local act = {}
      for i = level + 1, 3 do act[#act + 1] = qs[i] end
      local t = residues({ 2 }, act, n, seed + 500 + level)
      local u = C.modup(tb, t, level)
      local la = #act
      local first_digit = math.floor(level / 2)
      assert.are.same({ 2, 2 - first_digit, la + 2, n }, u.shape)
      for jj = 1, 2 - first_digit do
        local j = first_digit + jj - 1
        local lo, hi = math.max(2 * j, level), math.min(2 * j + 2, 3) -- the digit's prime ids [lo, hi)
        local src, dst, dst_rows = {}, {}, {}
        for p = lo, hi - 1 do src[#src + 1] = p end
        for r = 0, la + 1 do
          local pid = r < la and level + r or 3 + (r - la)
          if pid < lo or pid >= hi then
            dst[#dst + 1] = pid
            dst_rows[#dst_rows + 1] = r
          end
        end
        local digit = u:select(2, jj)
        local own = t:narrow(2, lo - level + 1, hi - lo)
        assert.is_true(fh.equal(digit:narrow(2, lo - level + 1, hi - lo), own), "own rows copied")
        local conv = C.bconv(tb, own, src, dst, true)
        for k, r in ipairs(dst_rows) do
          assert.is_true(fh.equal(digit:narrow(2, r + 1, 1), conv:narrow(2, k, 1)),
            ("level %d digit %d row %d"):format(level, j, r))
        end
      end
    end
    H.expect_error("ValueError", "level 3 is outside", C.modup, tb, residues({ 1 }, { qs[1] }, n, 1), 3)
  end)

  it("intt_sources: the inverse NTT's words scaled by each row's shat_inv, bit 63 flagging the centred lift", function()
    -- shat_inv of prime ids ps at row k: (prod of the others)^-1 mod ps[k]
    local function shat_inv(group, k)
      local q = group[k]
      local prod = 1ULL
      for i, s in ipairs(group) do
        if i ~= k then prod = H.mulmod(prod, s % q, q) end
      end
      return H.powmod(prod, q - 2, q)
    end
    local flag = bit.lshift(1ULL, 63)
    local function check(t, want_rows, got)
      local x, y = t:tolist(), got:tolist()
      assert.are.same(t.shape, got.shape)
      local flagged = 0
      for g = 1, #x do
        for r, wr in ipairs(want_rows) do
          for j = 1, n do
            local v = H.mulmod(x[g][r][j], wr.w, wr.q)
            local want = v > wr.q / 2ULL and v + flag or v
            flagged = flagged + (v > wr.q / 2ULL and 1 or 0)
            assert.are.equal(want, y[g][r][j])
          end
        end
      end
      assert.is_true(flagged > 0, "some words flagged")
    end
    -- the mod-up's sources at every level (digits {q0, q1}, {q2}; at level 1 the first digit is q1 alone)
    local digits = { { 1, 2 }, { 1, 2 }, { 3 } }
    for level = 0, 2 do
      local act = {}
      for i = level + 1, 3 do act[#act + 1] = qs[i] end
      local t = residues({ 2 }, act, n, seed + 700 + level)
      local ids_l = {}
      for i = level, 2 do ids_l[#ids_l + 1] = i end
      local rows = {}
      for r = level + 1, 3 do
        local group = {}
        for _, i in ipairs(digits[r]) do
          if i >= level + 1 then group[#group + 1] = qs[i] end
        end
        local k = 1
        for i, s in ipairs(group) do
          if s == qs[r] then k = i end
        end
        rows[#rows + 1] = { q = qs[r], w = shat_inv(group, k) }
      end
      check(C.intt(tb, t, ids_l), rows, C.intt_sources(tb, t, level))
      check(C.intt(tb, t, ids_l), rows, C.intt_sources(tb, t, level, "modup"))
    end
    -- a mod-down's sources: the P rows, shat_inv over P (the same at every level)
    local tp = residues({ 3 }, { ps[1], ps[2] }, n, seed + 800)
    local prow = { { q = ps[1], w = shat_inv({ ps[1], ps[2] }, 1) }, { q = ps[2], w = shat_inv({ ps[1], ps[2] }, 2) } }
    for level = 0, 2 do check(C.intt(tb, tp, { 3, 4 }), prow, C.intt_sources(tb, tp, level, "moddown")) end
    H.expect_error("ValueError", "level 3 is outside", C.intt_sources, tb, tp, 3, "moddown")
    H.expect_error("ValueError", "intt_sources", C.intt_sources, tb, tp, 0) -- 2 rows, level 0 has 3
    H.expect_error("ValueError", 'kind%) expected "modup" or "moddown", got "up"', C.intt_sources, tb, tp, 0, "up")
    H.expect_error("TypeError", "kind%) expected a string, got number", C.intt_sources, tb, tp, 0, 1)
    local no_p = C.tables(log_n, u64 { qs[1], qs[2] }, 2)
    H.expect_error("ValueError", "the tables have no P primes", C.intt_sources, no_p, residues({ 1 }, { qs[1], qs[2] }, n, 1), 0)
  end)

  it("strided groups (a narrowed batch) give the results of their contiguous copy", function()
    local wide = residues({ 3 }, { qs[1], qs[1], qs[2], qs[3] }, n, seed + 600)
    local v = wide:narrow(2, 2, 3)
    assert.is_false(v:is_contiguous())
    local c = v:contiguous()
    local ids3 = { 0, 1, 2 }
    assert.is_true(fh.equal(C.ntt(tb, v, ids3), C.ntt(tb, c, ids3)))
    assert.is_true(fh.equal(C.intt(tb, v, ids3), C.intt(tb, c, ids3)))
    assert.is_true(fh.equal(C.automorph(tb, v, ids3, 5, true), C.automorph(tb, c, ids3, 5, true)))
    assert.is_true(fh.equal(C.ew(tb, "add", ids3, v, c), C.ew(tb, "add", ids3, c, c)))
    assert.is_true(fh.equal(C.bconv(tb, v, ids3, { 3, 4 }, true), C.bconv(tb, c, ids3, { 3, 4 }, true)))
  end)
end)
