-- The CUDA NTT's FP64 butterflies (docs/ckks.md, "FP64 butterflies"): for primes
-- below 2^45 the GPU multiplies twiddles in doubles (fh_fp_mul). The CPU twin of
-- that arithmetic (core._ckks.fp_mul, core._ckks.ntt_fp) runs here in CI against
-- exact references: the product against a double-and-add in uint64 cdata, the
-- transforms against the CPU's integer NTT, word for word, on random rows and on
-- the rows that push the ranges furthest. The gpu-tagged part runs the same rows
-- through the CUDA kernels. Seeds are printed (FHELIUM_SEED replays one).
local fh = require "fhelium"
local H = require "spec.helpers"
local bit = require "bit"
local C = fh.core._ckks
local gpu_it = H.gpu_it

local TWO45 = 2ULL ^ 45

-- a message part as a Lua pattern matching it literally
local function plain(s) return (s:gsub("[%^%$%(%)%%%.%[%]%*%+%-%?]", "%%%0")) end
local function refuses(kind, message, fn) return H.expect_error(kind, plain(message), fn) end

local u64 = H.u64
-- the twiddle quotients of the CUDA passes: the tables' w / q rounded (column stages) and
-- w qinv formed on load (chunk stages, whose twiddle rows come from memory)
local QUOTIENTS = { "stored", "formed" }

local mulmod, powmod = H.mulmod, H.powmod

-- an integer-valued number (|x| < 2^53) modulo q, as uint64
local function num_mod(x, q)
  if x >= 0 then return (0ULL + x) % q end
  local m = (0ULL + (-x)) % q
  return m == 0ULL and 0ULL or q - m
end

-- rand(q): a word in [0, q), each call from the next seed after `seed`
local function words_from(seed)
  local rng = seed
  return function(q)
    rng = rng + 1
    return C.sample("uniform", 1, { q = q, seed = rng }):tolist()[1]
  end
end

-- every preset prime below 2^45 (the FP64-eligible ones), and each preset's N
local function eligible_primes()
  local seen, out = {}, {}
  for _, p in ipairs(fh.core.ckks_presets()) do
    local ctx = fh.CkksContext(p.name)
    for _, q in ipairs(ctx.primes) do
      if q < TWO45 and not seen[tostring(q)] then
        seen[tostring(q)] = true
        out[#out + 1] = q
      end
    end
  end
  return out
end

describe("FP64 modular products (fh_fp_mul, the CPU twin)", function()
  local seed = H.seed("ckks fp64 products")

  it("gives x w mod q exactly, centred within 0.625 q, up to |x| = 32 q", function()
    local qs = {}
    for _, bits in ipairs { 20, 30, 40, 44, 45 } do
      for _, q in ipairs(C.find_primes(bits, 4, 2):tolist()) do qs[#qs + 1] = q end
    end
    local rand = words_from(seed)
    for _, q in ipairs(qs) do
      local qd = tonumber(q)
      local ws = { 0ULL, 1ULL, q - 1ULL, q / 2ULL, rand(q), rand(q) }
      local xs = { 0, 1, -1, qd - 1, -(qd - 1), 4 * qd - 1, 16 * qd, -16 * qd, 32 * qd, -32 * qd }
      for _ = 1, 6 do
        local r = tonumber(rand(q))
        xs[#xs + 1] = r
        xs[#xs + 1] = -r * 13
      end
      for _, w in ipairs(ws) do
        for _, x in ipairs(xs) do
          local r = C.fp_mul(x, w, q)
          assert.equal(math.floor(r), r)
          assert.is_true(math.abs(r) <= 0.625 * qd, ("|r| = %.0f > 0.625 q (q = %s)"):format(math.abs(r), tostring(q)))
          local want = mulmod(num_mod(x, q), w, q)
          if num_mod(r, q) ~= want then
            error(("fp_mul(%.0f, %s, %s) = %.0f, not %s mod q"):format(x, tostring(w), tostring(q), r, tostring(want)))
          end
        end
      end
    end
  end)

  it("refuses what it does not cover", function()
    refuses("ValueError", "_ckks.fp_mul: argument 1 (x) expected an integer", function() C.fp_mul(0.5, 1, 97) end)
    refuses("ValueError", "below 2^50", function() C.fp_mul(2 ^ 51, 1, 97) end)
    refuses("ValueError", "_ckks.fp_mul: argument 3 (q) expected 2 <= q < 2^45", function() C.fp_mul(1, 1, TWO45 + 1ULL) end)
    refuses("ValueError", "_ckks.fp_mul: argument 2 (w) expected w < q", function() C.fp_mul(1, 97, 97) end)
  end)
end)

describe("FP64 key-switch inner products (fh_fp_mac, the CPU twin of ks2's)", function()
  local seed = H.seed("ckks fp64 inner products")

  -- R^-1 mod q, R = 2^64 (q prime)
  local function mont_rinv(q)
    local r = 1ULL
    for _ = 1, 64 do
      r = r + r
      if r >= q then r = r - q end
    end
    return powmod(r, q - 2ULL, q)
  end

  -- sum_j x_j k_j R^-1 mod q: what sum_j fh_mont_mul(x_j mod q, k_j) gives
  local function want(xs, ks, q, rinv)
    local s = 0ULL
    for j = 1, #xs do
      s = s + mulmod(num_mod(xs[j], q), ks[j], q)
      if s >= q then s = s - q end
    end
    return mulmod(s, rinv, q)
  end

  it("gives the integer path's word for 1 to 16 terms, |x| up to 32 q, 20- to 45-bit primes", function()
    local rand = words_from(seed)
    for _, bits in ipairs { 20, 30, 40, 44, 45 } do
      for _, q in ipairs(C.find_primes(bits, 3, 2):tolist()) do
        local qd, rinv = tonumber(q), mont_rinv(q)
        for _, n in ipairs { 1, 2, 9, 16 } do
          local cases = {
            function() return tonumber(rand(q)) - 3 * qd, rand(q) end, -- the NTT's outputs: |x| < 6 q
            function() return qd - 1, q - 1ULL end,
            function() return 32 * qd, q - 1ULL end,
            function() return -32 * qd, q - 1ULL end,
            function() return 0, rand(q) end,
          }
          for ci, case in ipairs(cases) do
            local xs, ks = {}, {}
            for j = 1, n do xs[j], ks[j] = case() end
            local got = C.fp_mac(xs, ks, q)
            local w = want(xs, ks, q, rinv)
            if 0ULL + got ~= w then
              error(("fp_mac case %d, %d terms, q = %s: %.0f, not %s"):format(ci, n, tostring(q), got, tostring(w)))
            end
          end
        end
      end
    end
  end)

  it("refuses what it does not cover", function()
    refuses("TypeError", "_ckks.fp_mac: xs[1] expected a number, got string", function() C.fp_mac({ "1" }, { 1 }, 97) end)
    refuses("ValueError", "_ckks.fp_mac: xs[1] expected an integer of size at most 32 q, got 0.5",
      function() C.fp_mac({ 0.5 }, { 1 }, 97) end)
    refuses("ValueError", "at most 32 q, got 3105", function() C.fp_mac({ 32 * 97 + 1 }, { 1 }, 97) end)
    refuses("ValueError", "_ckks.fp_mac: ks[1] expected a word below q, got 97", function() C.fp_mac({ 1 }, { 97 }, 97) end)
    refuses("ValueError", "_ckks.fp_mac: expected 1 to 16 xs and as many ks, got 2 and 1",
      function() C.fp_mac({ 1, 2 }, { 1 }, 97) end)
    refuses("ValueError", "expected 1 to 16 xs and as many ks, got 0 and 0", function() C.fp_mac({}, {}, 97) end)
    local many = {}
    for j = 1, 17 do many[j] = 1 end
    refuses("ValueError", "got 17 and 17", function() C.fp_mac(many, many, 97) end)
    refuses("ValueError", "_ckks.fp_mac: argument 3 (q) expected an odd 3 <= q < 2^45", function() C.fp_mac({ 1 }, { 1 }, 96) end)
    refuses("ValueError", "expected an odd 3 <= q < 2^45", function() C.fp_mac({ 1 }, { 1 }, TWO45 + 1ULL) end)
  end)
end)

describe("FP64 base conversion (fh_fp_conv_term, the CPU twin of ks1's)", function()
  local seed = H.seed("ckks fp64 conversions")
  local FLAG = bit.lshift(1ULL, 63)

  -- sum_i y_i w_i - v smt mod t, y_i without the flag, v the flags counted
  local function want(ys, ws, smt, t)
    local s, v = 0ULL, 0ULL
    for i = 1, #ys do
      local y = ys[i]
      if y >= FLAG then
        v = v + 1ULL
        y = y - FLAG
      end
      s = (s + mulmod(y, ws[i], t)) % t
    end
    return (s + t - mulmod(v, smt, t)) % t
  end

  it("gives the integer conversion's word for 1 to 4 sources below 2^50, flagged or not, 20- to 45-bit targets", function()
    local rand = words_from(seed)
    local TWO50 = 2ULL ^ 50
    for _, bits in ipairs { 20, 30, 40, 44, 45 } do
      for _, t in ipairs(C.find_primes(bits, 3, 2):tolist()) do
        for ns = 1, 4 do
          local cases = {
            function() return rand(TWO50), rand(t) end,
            function() return rand(TWO50) + FLAG, rand(t) end,
            function() return TWO50 - 1ULL, t - 1ULL end,
            function() return TWO50 - 1ULL + FLAG, t - 1ULL end,
            function() return 0ULL + FLAG, t - 1ULL end,
          }
          for ci, case in ipairs(cases) do
            local ys, ws = {}, {}
            for i = 1, ns do ys[i], ws[i] = case() end
            for _, smt in ipairs { 0ULL, t - 1ULL, rand(t) } do
              local got = C.fp_conv(ys, ws, smt, t)
              local w = want(ys, ws, smt, t)
              if 0ULL + got ~= w then
                error(("fp_conv case %d, %d sources, t = %s: %.0f, not %s"):format(ci, ns, tostring(t), got, tostring(w)))
              end
            end
          end
        end
      end
    end
  end)

  it("refuses what it does not cover", function()
    refuses("ValueError", "_ckks.fp_conv: ys[1] expected a residue below 2^50 (and bit 63), got 1125899906842624",
      function() C.fp_conv({ 2ULL ^ 50 }, { 1 }, 0, 97) end)
    refuses("ValueError", "_ckks.fp_conv: rows[1] expected a word below t, got 97", function() C.fp_conv({ 1 }, { 97 }, 0, 97) end)
    refuses("ValueError", "_ckks.fp_conv: argument 3 (smt) expected a word below t, got 97",
      function() C.fp_conv({ 1 }, { 1 }, 97, 97) end)
    refuses("ValueError", "_ckks.fp_conv: argument 4 (t) expected 3 <= t < 2^45", function() C.fp_conv({ 1 }, { 1 }, 0, TWO45) end)
    refuses("ValueError", "_ckks.fp_conv: expected 1 to 4 ys and as many rows, got 5 and 5",
      function() C.fp_conv({ 1, 1, 1, 1, 1 }, { 1, 1, 1, 1, 1 }, 0, 97) end)
    refuses("ValueError", "got 1 and 2", function() C.fp_conv({ 1 }, { 1, 1 }, 0, 97) end)
    refuses("TypeError", "_ckks.fp_conv: ys[i] expected an integer or uint64 cdata, got string",
      function() C.fp_conv({ "x" }, { 1 }, 0, 97) end)
  end)
end)

describe("FP64 NTT (the CUDA butterflies' CPU twin)", function()
  local seed = H.seed("ckks fp64 ntt")

  -- rows for primes qs at N: random residues, all q - 1, and q - 1 / 0 alternating
  local function rows(qs, n, s)
    local t = fh.empty({ 3 * #qs, n }, { dtype = "uint64" })
    local ids = {}
    for i, q in ipairs(qs) do
      t:select(1, i):copy_(C.sample("uniform", n, { q = q, seed = s + i }))
      t:select(1, #qs + i):fill_(q - 1ULL)
      local alt = {}
      for j = 1, n do alt[j] = j % 2 == 1 and q - 1ULL or 0ULL end
      t:select(1, 2 * #qs + i):copy_(u64(alt))
    end
    for k = 0, 2 do
      for i = 1, #qs do ids[k * #qs + i] = i - 1 end
    end
    return t, ids
  end

  it("matches the integer NTT and INTT word for word for every eligible preset prime", function()
    local primes = eligible_primes()
    assert.is_true(#primes > 100, "the presets' Q primes of 30 and 40 bits")
    -- N = 2^12 for every prime (each is 1 mod 2N for N up to its preset's), in chunks of 32
    local log_n = 12
    local n = 2 ^ log_n
    for c0 = 1, #primes, 32 do
      local qs = {}
      for i = c0, math.min(c0 + 31, #primes) do qs[#qs + 1] = primes[i] end
      local tb = C.tables(log_n, u64(qs), #qs)
      local t, ids = rows(qs, n, seed + c0)
      for k = 0, 2 do
        local part = t:narrow(1, k * #qs + 1, #qs):contiguous()
        local sub = {}
        for i = 1, #qs do sub[i] = ids[k * #qs + i] end
        local f = C.ntt(tb, part, sub)
        -- the tables' quotients (column stages) and the formed ones (w qinv: chunk stages)
        for _, qf in ipairs(QUOTIENTS) do
          assert.is_true(fh.equal(C.ntt_fp(tb, part, sub, true, qf), f), "forward, row kind " .. k .. ", " .. qf)
          assert.is_true(fh.equal(C.ntt_fp(tb, f, sub, false, qf), C.intt(tb, f, sub)),
            "inverse, row kind " .. k .. ", " .. qf)
          assert.is_true(fh.equal(C.ntt_fp(tb, part, sub, false, qf), C.intt(tb, part, sub)),
            "inverse of the raw rows, " .. qf)
        end
      end
    end
  end)

  it("matches at every ring size of the presets and below (N = 2 .. 2^16), 30- to 45-bit primes", function()
    for _, log_n in ipairs { 1, 2, 3, 4, 7, 11, 14, 16 } do
      local qs = {}
      for _, bits in ipairs { 30, 40, 45 } do qs[#qs + 1] = C.find_primes(bits, log_n, 1):tolist()[1] end
      local n = 2 ^ log_n
      local tb = C.tables(log_n, u64(qs), #qs)
      local t, ids = rows(qs, n, seed + 100 * log_n)
      local f = C.ntt(tb, t, ids)
      for _, qf in ipairs(QUOTIENTS) do
        assert.is_true(fh.equal(C.ntt_fp(tb, t, ids, true, qf), f), "forward N=2^" .. log_n .. ", " .. qf)
        assert.is_true(fh.equal(C.ntt_fp(tb, f, ids, false, qf), t), "inverse N=2^" .. log_n .. ", " .. qf)
      end
    end
  end)

  it("takes doubles below 4q in size (a conversion's) to the integer NTT's words of their residues", function()
    for _, log_n in ipairs { 4, 11, 14, 16 } do
      local qs = {}
      for _, bits in ipairs { 30, 40, 45 } do qs[#qs + 1] = C.find_primes(bits, log_n, 1):tolist()[1] end
      local n = 2 ^ log_n
      local tb = C.tables(log_n, u64(qs), #qs)
      local d = fh.empty({ 2 * #qs, n }, { dtype = "float64" })
      local words = fh.empty({ 2 * #qs, n }, { dtype = "uint64" })
      local ids = {}
      local rng = seed + 1000 * log_n
      for i, q in ipairs(qs) do
        local qd = tonumber(q)
        local u = C.sample("uniform", n, { q = 8 * q - 1ULL, seed = rng + i }):tolist() -- [0, 8q - 1)
        local a, b, wa, wb = {}, {}, {}, {}
        for j = 1, n do
          local x = tonumber(u[j]) - (4 * qd - 1) -- in (-4q, 4q)
          a[j] = x
          -- the extremes, alternating: 4q - 1 and -(4q - 1)
          b[j] = j % 2 == 1 and 4 * qd - 1 or -(4 * qd - 1)
          wa[j] = num_mod(a[j], q)
          wb[j] = num_mod(b[j], q)
        end
        d:select(1, i):copy_(fh.tensor(a, { dtype = "float64" }))
        d:select(1, #qs + i):copy_(fh.tensor(b, { dtype = "float64" }))
        words:select(1, i):copy_(u64(wa))
        words:select(1, #qs + i):copy_(u64(wb))
        ids[i], ids[#qs + i] = i - 1, i - 1
      end
      for _, qf in ipairs(QUOTIENTS) do
        assert.is_true(fh.equal(C.ntt_fp(tb, d, ids, true, qf), C.ntt(tb, words, ids)), "N=2^" .. log_n .. ", " .. qf)
      end
    end
  end)

  it("refuses primes of 45 bits and more, and bad rows", function()
    local qs = { C.find_primes(40, 4, 1):tolist()[1], C.find_primes(60, 4, 1):tolist()[1] }
    local tb = C.tables(4, u64(qs), 1)
    local ok = fh.zeros({ 1, 16 }, { dtype = "uint64" })
    refuses("ValueError", "_ckks.ntt_fp: argument 3 (ids) expected primes below 2^45, got " .. tostring(qs[2]):gsub("ULL", ""), function() C.ntt_fp(tb, ok, { 1 }, true) end)
    refuses("ValueError", "_ckks.ntt_fp: argument 3 (ids) expected prime ids below 2, got 2", function() C.ntt_fp(tb, ok, { 2 }, true) end)
    refuses("ValueError", "_ckks.ntt_fp: argument 2 (t) expected a contiguous uint64 CPU tensor [1, 16]", function() C.ntt_fp(tb, fh.zeros({ 1, 8 }, { dtype = "uint64" }), { 0 }, true) end)
    refuses("ValueError", "_ckks.ntt_fp: argument 2 (t) expected a contiguous uint64 CPU tensor", function() C.ntt_fp(tb, fh.zeros({ 1, 16 }), { 0 }, false) end)
    refuses("ValueError", "_ckks.ntt_fp: argument 2 (t) expected a contiguous uint64 CPU tensor", function() C.ntt_fp(tb, fh.zeros({ 1, 16 }, { dtype = "float32" }), { 0 }, true) end)
    local q4 = 4 * tonumber(qs[1])
    local function row_with(x) -- a float64 [1, 16] of zeros but x at the third word
      local r = {}
      for j = 1, 16 do r[j] = j == 3 and x or 0 end
      return fh.tensor({ r }, { dtype = "float64" })
    end
    refuses("ValueError", "_ckks.ntt_fp: argument 2 (t) expected integers below 4q in size, got 0.5 (row 1)", function() C.ntt_fp(tb, row_with(0.5), { 0 }, true) end)
    refuses("ValueError", "expected integers below 4q in size, got -" .. ("%.0f"):format(q4), function() C.ntt_fp(tb, row_with(-q4), { 0 }, true) end)
    refuses("ValueError", '_ckks.ntt_fp: argument 5 (quotients) expected "stored" or "formed", got "rounded"',
      function() C.ntt_fp(tb, ok, { 0 }, true, "rounded") end)
    refuses("TypeError", '_ckks.ntt_fp: argument 5 (quotients) expected "stored" or "formed", got number',
      function() C.ntt_fp(tb, ok, { 0 }, true, 1) end)
  end)

  gpu_it("runs on CUDA with the CPU's words on the extreme rows (row, column and chunk kernels)", function()
    local ok, err = pcall(function()
      local tg = C.tables(4, u64({ C.find_primes(40, 4, 1):tolist()[1] }), 1, { device = "cuda:0" })
      C.ntt_fp(tg, fh.zeros({ 1, 16 }, { dtype = "uint64" }), { 0 }, true)
    end)
    assert.is_false(ok)
    assert.matches("expected tables on the CPU", tostring(err), 1, true)
    for _, log_n in ipairs { 4, 11, 12, 14, 16, 17 } do
      local qs = {}
      for _, bits in ipairs { 30, 40, 45, 60 } do qs[#qs + 1] = C.find_primes(bits, log_n, 1):tolist()[1] end
      local n = 2 ^ log_n
      local tc = C.tables(log_n, u64(qs), 3)
      local tg = C.tables(log_n, u64(qs), 3, { device = "cuda:0" })
      local t, ids = rows(qs, n, seed + 1000 + log_n)
      local fc, fg = C.ntt(tc, t, ids), C.ntt(tg, t:cuda(), ids)
      assert.is_true(fh.equal(fc, fg:cpu()), "forward N=2^" .. log_n)
      assert.is_true(fh.equal(C.intt(tc, t, ids), C.intt(tg, t:cuda(), ids):cpu()), "inverse N=2^" .. log_n)
      assert.is_true(fh.equal(C.intt(tg, fg, ids):cpu(), t), "round trip N=2^" .. log_n)
    end
  end)
end)
