-- CUDA tensor operators against the CPU backend on fresh random inputs
-- (gpu specs). Elementwise arithmetic, casts, fills, RNS arithmetic,
-- integer sums and comparisons must agree bit for bit; floating sums to
-- rounding (the GPU adds in a tree order, the CPU left to right).
local fh = require "fhelium"
local H = require "spec.helpers"
local U = require "spec.support.cuda_util"
local gpu_it = H.gpu_it

local FLOATS = { float32 = true, float64 = true, complex128 = true }

local function ops_for(dt)
  if FLOATS[dt] then return { "add", "sub", "mul", "div" } end
  return { "add", "sub", "mul" }
end

local SCALAR = {
  uint8 = 7, int32 = -3, uint32 = 5, int64 = -9LL, uint64 = 18446744073709551557ULL,
  float32 = 1.5, float64 = -2.75, complex128 = { 1.5, -2 },
}

describe("CUDA tensor operators agree with the CPU", function()
  gpu_it("add, sub, mul, div and neg for every dtype, bit for bit", function()
    local r = U.rng(H.seed("cuda elementwise"))
    for _, dt in ipairs(U.arith_dtypes) do
      for _, shape in ipairs { { 257 }, { 4, 33, 5 }, { 20011 } } do
        local a, b = U.random(dt, shape, r), U.random(dt, shape, r)
        local ga, gb = a:cuda(), b:cuda()
        for _, op in ipairs(ops_for(dt)) do
          local g = fh[op](ga, gb)
          assert.equal("cuda:0", g.device)
          U.assert_same(fh[op](a, b), g, op .. " " .. dt)
        end
        U.assert_same(fh.neg(a), fh.neg(ga), "neg " .. dt)
        U.assert_same(-a, -ga, "unary minus " .. dt)
        U.assert_same(a + b, ga + gb, "+ " .. dt)
        U.assert_same(a * b, ga * gb, "* " .. dt)
      end
    end
  end)

  gpu_it("broadcasting, scalars on either side, strided operands, out= and in place", function()
    local r = U.rng(H.seed("cuda elementwise layouts"))
    for _, dt in ipairs(U.arith_dtypes) do
      local a, b = U.random(dt, { 3, 1, 5 }, r), U.random(dt, { 4, 5 }, r)
      local ga, gb = a:cuda(), b:cuda()
      local s = SCALAR[dt]
      for _, op in ipairs(ops_for(dt)) do
        U.assert_same(fh[op](a, b), fh[op](ga, gb), op .. " broadcast " .. dt)
        U.assert_same(fh[op](a, s), fh[op](ga, s), op .. " tensor-scalar " .. dt)
        U.assert_same(fh[op](s, a), fh[op](s, ga), op .. " scalar-tensor " .. dt)
      end
      local c, d = U.random(dt, { 6, 7 }, r), U.random(dt, { 7, 6 }, r)
      local gc, gd = c:cuda(), d:cuda()
      local out_c = fh.zeros({ 7, 6 }, { dtype = dt })
      local out_g = fh.zeros({ 6, 7 }, { dtype = dt, device = "cuda" }):transpose(1, 2)
      assert.equal(out_g, fh.mul(gc:transpose(1, 2), gd, { out = out_g }))
      fh.mul(c:transpose(1, 2), d, { out = out_c })
      U.assert_same(out_c, out_g, "strided out " .. dt)
      U.assert_same(fh.neg(c:transpose(1, 2)), fh.neg(gc:transpose(1, 2)), "strided neg " .. dt)
      U.assert_same(c:narrow(2, 2, 4) - d:transpose(1, 2):narrow(2, 3, 4),
        gc:narrow(2, 2, 4) - gd:transpose(1, 2):narrow(2, 3, 4), "narrowed " .. dt)
      local x, gx = c:clone(), gc:clone()
      x:add_(s)
      gx:add_(s)
      x:sub_(c)
      gx:sub_(gc)
      x:mul_(d:transpose(1, 2))
      gx:mul_(gd:transpose(1, 2))
      x:neg_()
      gx:neg_()
      U.assert_same(x, gx, "in place " .. dt)
    end
  end)

  gpu_it("refuses mixed devices and dtypes as the CPU does", function()
    local a = fh.ones({ 3 })
    local g = a:cuda()
    H.expect_error("ValueError", "different devices %(cpu and cuda:0%)", fh.add, a, g)
    H.expect_error("TypeError", "dtype mismatch", fh.add, g, fh.ones({ 3 }, { dtype = "float64", device = "cuda" }))
    H.expect_error("ValueError", "out is on cpu, expected cuda:0", fh.add, g, g, { out = fh.zeros({ 3 }) })
    H.expect_error("TypeError", "integer division", fh.div, g:to("int32"), g:to("int32"))
  end)

  gpu_it("casts between every pair of dtypes like the CPU (saturation, NaN, infinities)", function()
    local r = U.rng(H.seed("cuda casts"))
    local specials = fh.tensor({ 0, -0.0, 0.5, -0.5, 1.5, -1.5, 255.5, 256, -129, 2 ^ 31, -2 ^ 31 - 1, 2 ^ 32, 2 ^ 53 + 2,
      2 ^ 63, -2 ^ 63, 2 ^ 64, 1e300, -1e300, 1 / 0, -1 / 0, 0 / 0, 3e9, -3e9, 1e-310 }, { dtype = "float64" })
    for _, sd in ipairs(U.dtypes) do
      local sources = { U.random(sd, { 64 }, r) }
      if sd == "float32" or sd == "float64" or sd == "complex128" then sources[2] = specials:to(sd) end
      for _, src in ipairs(sources) do
        local gsrc = src:cuda()
        for _, dd in ipairs(U.dtypes) do
          if not (sd == "complex128" and dd ~= "complex128") then
            U.assert_same(src:to(dd), gsrc:to(dd), sd .. " -> " .. dd)
            local n = src:numel()
            if n % 8 == 0 then
              local v = src:view({ 8, n / 8 }):transpose(1, 2)
              U.assert_same(v:to(dd), gsrc:view({ 8, n / 8 }):transpose(1, 2):to(dd), sd .. " -> " .. dd .. " strided")
            end
          end
        end
      end
    end
    local gc = fh.zeros({ 2 }, { dtype = "complex128", device = "cuda" })
    H.expect_error("TypeError", "cannot convert complex128 to float64", gc.to, gc, "float64")
  end)

  gpu_it("fill_, full, zeros, ones, arange, rand and randn give the CPU's values", function()
    local values = {
      bool = { true, false }, uint8 = { 0, 200, 7 }, int32 = { -5, 0, 2147483647 }, uint32 = { 4294967295, 3 },
      int64 = { -1LL, 0, 9007199254740993LL }, uint64 = { 18446744073709551615ULL, 0, 12345 },
      float32 = { 0, -0.0, 1.25, 1e30 }, float64 = { -2.5, 0, 1e-300 }, complex128 = { { 1.5, -2.5 }, 0, 3 },
    }
    for _, dt in ipairs(U.dtypes) do
      for _, v in ipairs(values[dt]) do
        local what = dt .. " " .. tostring(v)
        U.assert_same(fh.full({ 5, 9 }, v, { dtype = dt }), fh.full({ 5, 9 }, v, { dtype = dt, device = "cuda" }), what)
        local c = fh.zeros({ 6, 8 }, { dtype = dt })
        local g = fh.zeros({ 6, 8 }, { dtype = dt, device = "cuda" })
        c:transpose(1, 2):narrow(1, 2, 3):fill_(v)
        assert.equal(g, g:transpose(1, 2):narrow(1, 2, 3):fill_(v) and g)
        U.assert_same(c, g, "strided fill " .. what)
      end
      U.assert_same(fh.zeros({ 3, 4 }, { dtype = dt }), fh.zeros({ 3, 4 }, { dtype = dt, device = "cuda" }), dt)
      U.assert_same(fh.ones({ 3, 4 }, { dtype = dt }), fh.ones({ 3, 4 }, { dtype = dt, device = "cuda" }), dt)
      if dt ~= "bool" and dt ~= "complex128" then
        U.assert_same(fh.arange(2, 100, 3, { dtype = dt }), fh.arange(2, 100, 3, { dtype = dt, device = "cuda" }), dt)
      end
    end
    local seed = H.seed("cuda random")
    for _, dt in ipairs { "float32", "float64", "complex128" } do
      U.assert_same(fh.rand({ 1000 }, { dtype = dt, generator = fh.Generator(seed) }),
        fh.rand({ 1000 }, { dtype = dt, generator = fh.Generator(seed), device = "cuda" }), "rand " .. dt)
      U.assert_same(fh.randn({ 10, 10 }, { dtype = dt, generator = fh.Generator(seed) }),
        fh.randn({ 10, 10 }, { dtype = dt, generator = fh.Generator(seed), device = "cuda" }), "randn " .. dt)
    end
  end)

  gpu_it("views of CUDA tensors read and copy out like the CPU's", function()
    local r = U.rng(H.seed("cuda views"))
    local a = U.random("float64", { 4, 6, 5 }, r)
    local g = a:cuda()
    local views = {
      function(t) return t:transpose(1, 3) end,
      function(t) return t:permute(3, 1, 2) end,
      function(t) return t:narrow(2, 2, 3) end,
      function(t) return t:select(1, 3) end,
      function(t) return t:view({ 24, 5 }) end,
      function(t) return t:transpose(1, 2):reshape({ 5, -1 }) end,
      function(t) return t:select(3, 2):transpose(1, 2) end,
    }
    for i, f in ipairs(views) do
      U.assert_same(f(a), f(g), "view " .. i)
      U.assert_same(f(a):contiguous(), f(g):contiguous(), "contiguous " .. i)
      U.assert_same(f(a):clone(), f(g):clone(), "clone " .. i)
      assert.equal("cuda:0", f(g):clone().device)
    end
    -- a same-device copy between overlapping views behaves as memmove
    local h = fh.arange(20, { dtype = "int32" })
    local gh = h:cuda()
    h:narrow(1, 3, 15):copy_(h:narrow(1, 1, 15))
    gh:narrow(1, 3, 15):copy_(gh:narrow(1, 1, 15))
    U.assert_same(h, gh, "overlapping copy")
  end)

  gpu_it("RNS add, sub, mul and neg are exact for moduli up to 2^62", function()
    local r = U.rng(H.seed("cuda rns"))
    local function random_modulus()
      local q = U.u64(r) % (4611686018427387904ULL - 1099511627776ULL) + 1099511627776ULL
      return q + 1 - q % 2 -- odd, in [2^40, 2^62)
    end
    local moduli = { 2ULL, 97ULL, 2305843009213693952ULL, 4611686018427387847ULL, 3ULL, random_modulus(),
      random_modulus(), 1152921504606846883ULL }
    for _, shape in ipairs { { 8, 1000 }, { 3, 8, 513 }, { 8, 1 } } do
      local a, b = U.residues(shape, moduli, r), U.residues(shape, moduli, r)
      local ga, gb = a:cuda(), b:cuda()
      for _, op in ipairs { "add", "sub", "mul" } do
        U.assert_same(fh.rns[op](a, b, moduli), fh.rns[op](ga, gb, moduli), ("rns.%s %dD"):format(op, #shape))
      end
      U.assert_same(fh.rns.neg(a, moduli), fh.rns.neg(ga, moduli), "rns.neg")
    end
    -- strided operands (a narrowed last dimension, a limb dimension with a gap), out= and moduli as a tensor
    local wide = U.residues({ 8, 2000 }, moduli, r)
    local gwide = wide:cuda()
    local a, ga = wide:narrow(2, 1001, 1000), gwide:narrow(2, 1001, 1000)
    local b = U.residues({ 8, 1000 }, moduli, r)
    local gb = b:cuda()
    local mt = fh.tensor(moduli, { dtype = "uint64" })
    U.assert_same(fh.rns.mul(a, b, moduli), fh.rns.mul(ga, gb, mt), "strided rns.mul")
    local out_g = fh.zeros({ 8, 1000 }, { dtype = "uint64", device = "cuda" })
    assert.equal(out_g, fh.rns.add(ga, gb, moduli, { out = out_g }))
    U.assert_same(fh.rns.add(a, b, moduli), out_g, "rns.add out=")
    fh.rns.sub(gb, ga, moduli, { out = gb }) -- in place
    U.assert_same(fh.rns.sub(b, a, moduli), gb, "rns.sub in place")
    -- a 2^19-element product, many blocks per row
    local big_a = U.residues({ 8, 2 ^ 16 }, moduli, r)
    local big_b = U.residues({ 8, 2 ^ 16 }, moduli, r)
    U.assert_same(fh.rns.mul(big_a, big_b, moduli), fh.rns.mul(big_a:cuda(), big_b:cuda(), moduli), "rns.mul 2^19")
  end)

  gpu_it("sum: integers exactly (wrapping), floats to rounding", function()
    local r = U.rng(H.seed("cuda sum"))
    local g = fh.Generator(H.seed("cuda sum floats"))
    local cases = {}
    for _, dt in ipairs(U.dtypes) do
      for _, shape in ipairs { { 0 }, { 1 }, { 257 }, { 3, 20011 } } do
        cases[#cases + 1] = U.random(dt, shape, r)
      end
    end
    local big = fh.rand({ 2 ^ 21 + 13 }, { generator = g, dtype = "float64" })
    cases[#cases + 1] = big
    cases[#cases + 1] = big:to("float32")
    cases[#cases + 1] = ((big - 0.5) * 4e9):to("int32")
    cases[#cases + 1] = ((big - 0.5) * 4e18):to("int64")
    for _, c in ipairs(cases) do
      for _, t in ipairs { c, c:dim() == 2 and c:transpose(1, 2) or c } do
        local cs, gs = fh.sum(t), fh.sum(t:cuda())
        assert.equal("cuda:0", gs.device)
        assert.equal(cs.dtype, gs.dtype)
        local what = ("sum %s %s"):format(c.dtype, table.concat(t.shape, "x"))
        if not FLOATS[c.dtype] then
          U.assert_same(cs, gs, what)
        else
          local n = math.max(1, t:numel())
          local x, y = cs:item(), gs:item()
          if type(x) ~= "table" then x, y = { x }, { y } end
          for k = 1, #x do
            -- the two orders differ by rounding only: far below this bound (|x| <= 128)
            local tol = math.abs(x[k]) * (c.dtype == "float32" and 2 ^ -22 or 0) + 1e-12 * n * 128
            assert.is_true(math.abs(x[k] - y[k]) <= tol, ("%s: %.17g vs %.17g"):format(what, x[k], y[k]))
          end
        end
      end
    end
  end)

  gpu_it("equal, allclose and max_abs_diff agree with the CPU", function()
    local r = U.rng(H.seed("cuda compare"))
    for _, dt in ipairs(U.dtypes) do
      local a = U.random(dt, { 50, 41 }, r)
      local b = U.random(dt, { 50, 41 }, r)
      local ga, gb = a:cuda(), b:cuda()
      assert.is_true(fh.equal(ga, a:cuda()))
      assert.is_true(fh.equal(ga, a)) -- devices may differ
      assert.is_true(fh.equal(a, ga))
      assert.equal(fh.equal(a, b), fh.equal(ga, gb))
      local one = a:clone()
      one:narrow(1, 7, 1):narrow(2, 3, 1):copy_(b:narrow(1, 7, 1):narrow(2, 3, 1))
      assert.equal(fh.equal(a, one), fh.equal(ga, one:cuda()))
      assert.is_false(fh.equal(ga, ga:view({ 41, 50 })))
      local cm, gm = fh.max_abs_diff(a, b), fh.max_abs_diff(ga, gb)
      if dt == "complex128" then
        assert.is_true(math.abs(cm - gm) <= cm * 2 ^ -50, ("max_abs_diff %s: %.17g vs %.17g"):format(dt, cm, gm))
      else
        assert.equal(cm, gm, "max_abs_diff " .. dt)
      end
      if dt ~= "complex128" then
        assert.equal(fh.max_abs_diff(a:transpose(1, 2), b:transpose(1, 2)),
          fh.max_abs_diff(ga:transpose(1, 2), gb:transpose(1, 2)), "strided max_abs_diff " .. dt)
      end
      for _, tol in ipairs { { rtol = 0, atol = 0 }, { rtol = 1e-5, atol = 1e-8 }, { rtol = 0.5, atol = 0 }, { rtol = 0, atol = 1e30 } } do
        assert.equal(fh.allclose(a, b, tol), fh.allclose(ga, gb, tol))
        assert.equal(fh.allclose(a, one, tol), fh.allclose(ga, one:cuda(), tol))
      end
    end
    -- NaN: max_abs_diff is NaN and nothing is close, on both devices
    local x = fh.tensor({ 1, 0 / 0, 3 }, { dtype = "float64" })
    local y = fh.tensor({ 1, 2, 3 }, { dtype = "float64" })
    local cm, gm = fh.max_abs_diff(x, y), fh.max_abs_diff(x:cuda(), y:cuda())
    assert.is_true(cm ~= cm and gm ~= gm)
    assert.is_false(fh.allclose(x:cuda(), x:cuda()))
    assert.is_false(fh.equal(x:cuda(), x:cuda()))
    local z = fh.tensor({ 1, 2.5, 3 }, { dtype = "float64" })
    assert.equal(fh.allclose(z, y, { rtol = 0.1 }), fh.allclose(z:cuda(), y:cuda(), { rtol = 0.1 }))
  end)
end)
