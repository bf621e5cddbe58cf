-- CKKS contexts: presets, prime rules, ids, interning, validation.
local ffi = require "ffi"
local fh = require "fhelium"
local H = require "spec.helpers"
local T = require "spec.fixtures.small_context"

local function u64(x) return ffi.cast("uint64_t", x) end
local function num(x) return tonumber(x) end

describe("CKKS context", function()
  describe("presets", function()
    local expected = {
      slots8192_scale30_levels9_int64 = { 14, 30, 9, 1 },
      slots8192_scale40_levels7_int64 = { 14, 40, 7, 1 },
      slots8192_scale50_levels5_int64 = { 14, 50, 5, 1 },
      slots16384_scale30_levels21_int64 = { 15, 30, 21, 2 },
      slots16384_scale40_levels16_int64 = { 15, 40, 16, 2 },
      slots16384_scale50_levels12_int64 = { 15, 50, 12, 2 },
      slots32768_scale30_levels45_int64 = { 16, 30, 45, 4 },
      slots32768_scale40_levels34_int64 = { 16, 40, 34, 4 },
      slots32768_scale50_levels27_int64 = { 16, 50, 27, 4 },
      slots65536_scale30_levels95_int64 = { 17, 30, 95, 6 },
      slots65536_scale40_levels72_int64 = { 17, 40, 72, 6 },
      slots65536_scale50_levels58_int64 = { 17, 50, 58, 6 },
    }

    it("lists the twelve levels presets and FHElium 0.30's seventeen, with their value strings", function()
      local n, levels, v030 = 0, 0, 0
      for member, name in pairs(fh.Preset) do
        n = n + 1
        assert.equal(member:gsub("_", "-"), name)
        if member:find("_levels") then
          levels = levels + 1
          assert.is_not_nil(expected[member], member)
        else
          assert.truthy(member:find("^slots%d+_scale%d+_depth%d+_int%d%d$"), member)
          v030 = v030 + 1
        end
      end
      assert.equal(12, levels)
      assert.equal(17, v030)
      assert.equal(29, n)
      assert.equal("slots8192-scale40-levels7-int64", fh.Preset.slots8192_scale40_levels7_int64)
      assert.equal("slots8192-scale40-depth7-int64", fh.Preset.slots8192_scale40_depth7_int64)
      for _, p in ipairs(require("fhelium.values").presets) do
        assert.equal(p.member:find("_levels") and "levels" or "fhelium-0.30", p.family)
      end
    end)

    for member, e in pairs(expected) do
      it("builds " .. member .. " by the documented prime rule within its 128-bit budget", function()
        local logn, b, levels, np = e[1], e[2], e[3], e[4]
        local ctx = fh.CkksContext(fh.Preset[member])
        local n = 2 ^ logn
        assert.equal(n, ctx.ring_degree)
        assert.equal(n / 2, ctx.num_slots)
        assert.equal(logn, ctx.log_n)
        assert.equal(2 ^ b, ctx.default_scale)
        assert.equal(levels - 1, ctx.max_level)
        assert.equal(levels + 1, ctx.num_q_primes)
        assert.equal(np, ctx.num_p_primes)
        assert.equal(fh.Preset[member], ctx.preset)
        local q, p = ctx.q_primes, ctx.p_primes
        assert.equal(levels + 1, #q)
        assert.equal(np, #p)
        local m = u64(2 * n)
        local all = {}
        for _, x in ipairs(q) do all[#all + 1] = x end
        for _, x in ipairs(p) do all[#all + 1] = x end
        local seen = {}
        for _, x in ipairs(all) do
          assert.equal("cdata", type(x))
          assert.is_true(fh.is_prime(x))
          assert.equal(1ULL, x % m)
          assert.is_true(x < 2ULL ^ 60) -- 4q < 2^62
          assert.is_nil(seen[tostring(x)])
          seen[tostring(x)] = true
        end
        -- scale primes: nearest above 2^b, then nearest below, alternating;
        -- each is the first prime on its side after the previous one
        local center = 2ULL ^ b + 1
        local up, down = center, center
        for i = 1, levels do
          if i % 2 == 1 then
            while not fh.is_prime(up) do up = up + m end
            assert.equal(up, q[i])
            up = up + m
          else
            down = down - m
            while not fh.is_prime(down) do down = down - m end
            assert.equal(down, q[i])
          end
        end
        -- the base Q prime and the P primes: the largest primes = 1 mod 2N below 2^60
        local c = 2ULL ^ 60 + 1
        local big = {}
        while #big < 1 + np do
          c = c - m
          if fh.is_prime(c) then big[#big + 1] = c end
        end
        assert.equal(big[1], q[levels + 1])
        for i = 1, np do assert.equal(big[1 + i], p[i]) end
        assert.is_true(ctx.modulus_bits <= ctx.security_budget_bits)
        assert.equal(fh.ckks_security_budget_bits(n), ctx.security_budget_bits)
      end)
    end

    it("accepts the member name as well as the value string and shares one object", function()
      local a = fh.CkksContext("slots8192_scale40_levels7_int64")
      local b = fh.CkksContext(fh.Preset.slots8192_scale40_levels7_int64)
      assert.equal(a.id, b.id)
      assert.is_true(a == b)
    end)

    it("rejects an unknown preset naming the known ones", function()
      H.expect_error("ValueError", { "unknown preset 'slots8192%-scale40%-levels8%-int64'", "slots65536_scale50_levels58_int64" },
        fh.CkksContext, "slots8192-scale40-levels8-int64")
    end)
  end)

  describe("ids", function()
    it("are the SHA-256 of the documented canonical encoding", function()
      local ctx = fh.CkksContext(fh.Preset.slots8192_scale40_levels7_int64)
      local parts = { "fhelium.ckks_context.v1\n" }
      local function le(v, bytes)
        local s = {}
        v = u64(v)
        for i = 0, bytes - 1 do s[#s + 1] = string.char(num(bit.band(bit.rshift(v, 8 * i), 0xff))) end
        return table.concat(s)
      end
      parts[#parts + 1] = le(ctx.log_n, 4)
      local d = ffi.new("double[1]", ctx.default_scale)
      parts[#parts + 1] = ffi.string(d, 8)
      parts[#parts + 1] = le(#ctx.q_primes, 4)
      for _, q in ipairs(ctx.q_primes) do parts[#parts + 1] = le(q, 8) end
      parts[#parts + 1] = le(#ctx.p_primes, 4)
      for _, p in ipairs(ctx.p_primes) do parts[#parts + 1] = le(p, 8) end
      local path = os.tmpname()
      local f = assert(io.open(path, "wb"))
      f:write(table.concat(parts))
      f:close()
      local pipe = io.popen("sha256sum " .. path)
      local out = pipe:read("*a")
      pipe:close()
      os.remove(path)
      local hex = out:match("^(%x+)")
      if not hex then return pending("sha256sum is not available") end
      assert.equal(hex, ctx.id)
      assert.equal(64, #ctx.id)
    end)

    it("are equal for equal parameters (the same live object) and differ for any change", function()
      local base = { ring_degree = 16, default_scale = 2 ^ 20, q_primes = T.primes(16, 30, 3),
        p_primes = T.primes(16, 31, 1), enforce_security_budget = false }
      local function with(changes)
        local s = {}
        for k, v in pairs(base) do s[k] = v end
        for k, v in pairs(changes) do s[k] = v end
        return fh.CkksContext(s)
      end
      local a, b = with {}, with {}
      assert.equal(a.id, b.id)
      assert.is_true(a == b)
      local q = base.q_primes
      local variants = {
        with { default_scale = 2 ^ 21 },
        with { q_primes = { q[2], q[1], q[3] } },              -- order matters
        with { q_primes = T.primes(16, 30, 3, 1) },             -- another prime
        with { p_primes = T.primes(16, 31, 1, 1) },
        with { q_primes = { q[1], q[2] }, p_primes = { q[3], base.p_primes[1] } }, -- Q/P split
        with { ring_degree = 8 },
      }
      local ids = { [a.id] = true }
      for i, v in ipairs(variants) do
        assert.is_nil(ids[v.id], "variant " .. i .. " has a repeated id")
        ids[v.id] = true
        assert.is_false(v == a)
      end
    end)

    it("finds live contexts by id and forgets dead ones", function()
      local ctx = T.context { skip = 7 }
      local id = ctx.id
      assert.is_true(fh.context_lookup(id) == ctx)
      ctx = nil
      collectgarbage()
      collectgarbage()
      H.expect_error("ValueError", "unknown context_id", fh.context_lookup, id)
    end)
  end)

  describe("fields", function()
    local ctx = T.context()
    it("expose primes as exact uint64 cdata and prime ids per level and basis", function()
      assert.equal(16, ctx.ring_degree)
      assert.equal(8, ctx.num_slots)
      assert.equal(1, ctx.max_level)
      assert.equal(3, #ctx.q_primes)
      assert.equal(4, #ctx.primes)
      assert.equal(ctx.q_primes[2], ctx:prime(1))
      assert.equal(ctx.p_primes[1], ctx:prime(3))
      H.expect_error("ValueError", "CkksContext:prime: id must be an integer in %[0, 3%], got 99", ctx.prime, ctx, 99)
      assert.same({ 0, 1, 2 }, ctx:prime_ids(0))
      assert.same({ 1, 2 }, ctx:prime_ids(1, "Q"))
      assert.same({ 1, 2, 3 }, ctx:prime_ids(1, "QP"))
      assert.is_nil(ctx.preset)
      assert.is_nil(ctx.security_budget_bits)
      assert.matches("ring_degree=16, num_slots=8, max_level=1, default_scale=2%^20", tostring(ctx))
    end)

    it("rejects a level outside [0, max_level] and an unknown basis", function()
      H.expect_error("StateError", "level 2 is outside %[0, 1%]", ctx.prime_ids, ctx, 2)
      H.expect_error("StateError", "level %-1 is outside", ctx.prime_ids, ctx, -1)
      H.expect_error("ValueError", "modulus_basis must be one of", ctx.prime_ids, ctx, 0, "P")
      H.expect_error("ValueError", "id must be an integer in %[0, 3%]", ctx.prime, ctx, 4)
    end)

    it("is immutable", function()
      H.expect_error("TypeError", "immutable", function() ctx.ring_degree = 8 end)
    end)
  end)

  describe("extension slots", function()
    it("build once per context, nest, and are freed with the context", function()
      local core = fh.core
      local c = T.context { skip = 9 }
      local b0, f0 = core._ext_probe(c)
      local b1, f1, same = core._ext_probe(c)
      assert.equal(b0, b1) -- built once (outer + nested inner on the first call)
      assert.equal(f0, f1)
      assert.is_true(same)
      H.expect_error("ValueError", "context extension slot 0 is empty and no builder was given", core._ext_probe, c, 0)
      H.expect_error("ValueError", "context extension slot 99 outside %[0, 8%)", core._ext_probe, c, 99)
      c = nil
      collectgarbage()
      collectgarbage()
      local _, f2 = core._ext_probe(T.context { skip = 10 })
      assert.equal(f1 + 2, f2) -- both slots of the dead context were freed
    end)
  end)

  describe("validation", function()
    local q, p = T.primes(16, 30, 3), T.primes(16, 31, 1)
    local function spec(changes)
      local s = { ring_degree = 16, default_scale = 2 ^ 20, q_primes = q, p_primes = p, enforce_security_budget = false }
      for k, v in pairs(changes or {}) do s[k] = v end
      return s
    end

    it("rejects a ring degree that is not a power of two in range", function()
      H.expect_error("ValueError", "ring_degree must be a power of two", fh.CkksContext, spec { ring_degree = 24 })
      H.expect_error("ValueError", "ring_degree must be a power of two", fh.CkksContext, spec { ring_degree = 2 ^ 18 })
      H.expect_error("ValueError", "ring_degree must be a power of two", fh.CkksContext, spec { ring_degree = 1 })
      H.expect_error("ValueError", "ring_degree must be an integer", fh.CkksContext, spec { ring_degree = 16.5 })
      H.expect_error("TypeError", "ring_degree.*expected an integer", fh.CkksContext, spec { ring_degree = "16" })
    end)

    it("rejects a default scale that is not positive and finite", function()
      for _, s in ipairs { 0, -1, math.huge, 0 / 0 } do
        H.expect_error("ValueError", "default_scale must be positive and finite", fh.CkksContext, spec { default_scale = s })
      end
      H.expect_error("TypeError", "default_scale expected a number", fh.CkksContext, spec { default_scale = "x" })
    end)

    it("rejects composite, non-NTT-friendly, out-of-range and repeated primes", function()
      H.expect_error("ValueError", "q_primes%[2%] = 33 is not prime", fh.CkksContext, spec { q_primes = { q[1], 33, q[3] } })
      H.expect_error("ValueError", "q_primes%[1%] = 1073741827 is not NTT%-friendly", fh.CkksContext,
        spec { q_primes = { 1073741827, q[2], q[3] } })
      H.expect_error("ValueError", "p_primes%[1%] = .* is outside %[2, 2%^62%)", fh.CkksContext,
        spec { p_primes = { 2ULL ^ 62 + 33 } })
      H.expect_error("ValueError", "q_primes%[1%] = 1 is outside", fh.CkksContext, spec { q_primes = { 1, q[2], q[3] } })
      H.expect_error("ValueError", "p_primes%[1%] = .* repeats q_primes%[2%]", fh.CkksContext, spec { p_primes = { q[2] } })
      H.expect_error("ValueError", "is a Lua number above 2%^53, where numbers skip integers.*give primes above 2%^53 as ULL literals", fh.CkksContext,
        spec { p_primes = { 2 ^ 60 } })
      H.expect_error("TypeError", "q_primes%[2%] expected an integer", fh.CkksContext, spec { q_primes = { q[1], "7" } })
      H.expect_error("TypeError", "q_primes expected a list of primes", fh.CkksContext, spec { q_primes = 7 })
    end)

    it("accepts primes up to 2^62 given as ULL literals", function()
      local big = {}
      local c = 2ULL ^ 62 + 1
      while #big < 1 do
        c = c - 32
        if fh.is_prime(c) then big[#big + 1] = c end
      end
      local ctx = fh.CkksContext(spec { p_primes = big })
      assert.equal(big[1], ctx.p_primes[1])
    end)

    it("needs at least two Q primes and one P prime, at most 128 primes", function()
      H.expect_error("ValueError", "q_primes needs at least 2 primes", fh.CkksContext, spec { q_primes = { q[1] } })
      H.expect_error("ValueError", "p_primes needs at least 1 prime", fh.CkksContext, spec { p_primes = {} })
      local many = T.primes(16, 40, 129)
      H.expect_error("ValueError", "lists 129 primes", fh.CkksContext, spec { q_primes = many })
      H.expect_error("ValueError", "at most 128 primes in all", fh.CkksContext,
        spec { q_primes = T.primes(16, 40, 120), p_primes = T.primes(16, 45, 9) })
    end)

    it("enforces the 128-bit security budget unless told not to", function()
      H.expect_error("ValueError", "no 128%-bit security budget is tabulated for ring_degree 16", fh.CkksContext,
        spec { enforce_security_budget = true })
      local n = 1024
      H.expect_error("ValueError", "log2%(QP%) = %d+ bits exceeds the 128%-bit security budget of 26 bits", fh.CkksContext,
        { ring_degree = n, default_scale = 2 ^ 20, q_primes = T.primes(n, 30, 2), p_primes = T.primes(n, 31, 1) })
      -- the default is to enforce
      H.expect_error("ValueError", "no 128%-bit security budget", fh.CkksContext,
        { ring_degree = 16, default_scale = 2 ^ 20, q_primes = q, p_primes = p })
      local ok = fh.CkksContext(spec {})
      assert.equal(121, ok.modulus_bits)
    end)

    it("publishes the budget table of the 2025 HE security guidelines", function()
      local want = { [1024] = 26, [2048] = 53, [4096] = 106, [8192] = 214, [16384] = 430, [32768] = 868,
        [65536] = 1747, [131072] = 3523 }
      for n, b in pairs(want) do assert.equal(b, fh.ckks_security_budget_bits(n)) end
      assert.is_nil(fh.ckks_security_budget_bits(512))
    end)

    it("rejects unknown parameter names and other argument types", function()
      H.expect_error("ValueError", "unknown option 'levels'", fh.CkksContext, spec { levels = 3 })
      H.expect_error("TypeError", "expected a preset name or a parameter table", fh.CkksContext, 5)
      H.expect_error("ValueError", "ring_degree is required", fh.CkksContext, { default_scale = 1 })
    end)
  end)

  describe("is_prime", function()
    it("is exact for 64-bit integers, including strong pseudoprimes", function()
      local primes = { 2, 3, 5, 37, 1073741789, 2ULL ^ 61 - 1, 2ULL ^ 62 - 57, 18446744073709551557ULL }
      -- 561 is a Carmichael number; the others are strong pseudoprimes to
      -- every base up to 7, 11, 13, 17 and 23 respectively
      local composites = { 0, 1, 4, 561, 3215031751, 2152302898747, 3474749660383, 341550071728321,
        3825123056546413051ULL, 2ULL ^ 62, 18446744073709551615ULL, (2ULL ^ 62 - 57) * 3ULL }
      for _, x in ipairs(primes) do assert.is_true(fh.is_prime(x), tostring(x)) end
      for _, x in ipairs(composites) do assert.is_false(fh.is_prime(x), tostring(x)) end
    end)
  end)
end)
