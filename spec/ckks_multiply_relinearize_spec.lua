-- engine:multiply(a, b, {relinearize = rlk[, rescale = true]}): multiply fused with
-- relinearize (and the rescale), word for word relinearize(multiply(a, b), rlk[, {rescale =
-- true}]) (docs/ckks.md, "Multiply fused with relinearize"). N > 2^11 takes the fused path
-- (the INTT forms a1 b1's rows from the operands' words, the mod-down adds a0 b0 and
-- a0 b1 + a1 b0 formed the same way: the tensor product is never written); smaller rings
-- run the calls in turn. Both devices run the same host code: the CPU specs check the
-- kernels' CPU twins (fh_ckks_ntt_args.in_b, fh_ckks_moddown_args.add_b), the gpu-tagged
-- ones the CUDA kernels against them.
local fh = require "fhelium"
local ex = require "fhelium.execution"
local H = require "spec.helpers"

local params = H.ckks_params

-- (the seed does not name the device: the "devices" check compares two engines' words)
local function setup(device, log_n, p_bits, batch, label)
  local seed = H.seed(("multiply relinearize %s %d %d %d"):format(label, log_n, #p_bits, batch))
  return H.ckks_operands(device, log_n, p_bits, batch, seed)
end

-- the fused and the separate calls' words, levels, scales and domains agree (at levels 0
-- and 1, with and without the rescale), and the result decrypts to the product
local function check(device, log_n, p_bits, batch)
  local e, sk, rlk, a, b, want = setup(device, log_n, p_bits, batch, "words")
  for _, start in ipairs { 0, 1 } do
    local x, y = a, b
    for _ = 1, start do x, y = e:rescale_to_next_level(x), e:rescale_to_next_level(y) end
    for _, rescale in ipairs { false, true } do
      local fused = e:multiply(x, y, { relinearize = rlk, rescale = rescale })
      local sep = e:relinearize(e:multiply(x, y), rlk, { rescale = rescale })
      local what = ("%s, log_n %d, %d P, batch %d, level %d, rescale %s"):format(device, log_n, #p_bits, batch, start,
        tostring(rescale))
      assert.is_true(fh.equal(fused.data, sep.data), what .. ": the words of multiply then relinearize")
      assert.are.equal(sep.level, fused.level, what)
      assert.are.equal(start + (rescale and 1 or 0), fused.level, what)
      assert.are.equal(sep.scale, fused.scale, what)
      assert.are.equal("ntt", fused.polynomial_domain, what)
      assert.are.equal(2, fused.num_components, what)
      assert.are.same(sep.data.shape, fused.data.shape, what)
      if start == 0 then
        local got = e:decrypt_message(fused, sk, { is_real = true }):cpu()
        local err = fh.max_abs_diff(got, want)
        assert.is_true(err < 1e-6, what .. ": decryption error " .. err)
      end
    end
  end
end

describe("CkksEngine:multiply with relinearize", function()
  for _, c in ipairs { { 12, { 60 }, 1 }, { 12, { 60, 60 }, 3 }, { 13, { 60, 60 }, 1 }, { 10, { 60, 60 }, 2 } } do
    it(("gives relinearize(multiply(a, b)) bit for bit (cpu, log_n %d, %d P primes, batch %d)"):format(c[1], #c[2],
      c[3]), function() check("cpu", c[1], c[2], c[3]) end)
  end

  it("runs one submit fewer than the two calls above 2^11 (the tensor product is never written)", function()
    local e, _, rlk, a, b = setup("cpu", 12, { 60 }, 1, "submits")
    local function submits(f)
      local before = fh.core.info().launches
      f()
      return fh.core.info().launches - before
    end
    local sep = submits(function() e:relinearize(e:multiply(a, b), rlk, { rescale = true }) end)
    local fused = submits(function() e:multiply(a, b, { relinearize = rlk, rescale = true }) end)
    assert.are.equal(sep - 1, fused)
  end)

  it("is the calls in turn at N <= 2^11 (the same submits)", function()
    local e, _, rlk, a, b = setup("cpu", 10, { 60 }, 1, "small")
    local before = fh.core.info().launches
    e:relinearize(e:multiply(a, b), rlk)
    local sep = fh.core.info().launches - before
    before = fh.core.info().launches
    e:multiply(a, b, { relinearize = rlk })
    assert.are.equal(sep, fh.core.info().launches - before)
  end)

  H.gpu_it("gives relinearize(multiply(a, b)) bit for bit on cuda:0, and the CPU's words", function()
    check("cuda:0", 12, { 60 }, 1)
    check("cuda:0", 13, { 60, 60 }, 3)
    check("cuda:0", 14, { 60 }, 2)
    local ec, _, rlkc, ac, bc = setup("cpu", 14, { 60 }, 1, "devices")
    local eg, _, rlkg, ag, bg = setup("cuda:0", 14, { 60 }, 1, "devices")
    for _, rescale in ipairs { false, true } do
      local c = ec:multiply(ac, bc, { relinearize = rlkc, rescale = rescale })
      local g = eg:multiply(ag, bg, { relinearize = rlkg, rescale = rescale })
      assert.is_true(fh.equal(c.data, g.data:cpu()), "the CPU's and CUDA's words, rescale " .. tostring(rescale))
    end
  end)

  H.gpu_it("replays in a CUDA graph program with the eager call's words", function()
    local e, _, rlk, a, b = setup("cuda:0", 14, { 60 }, 1, "graph")
    local function f(x, y) return e:multiply(x, y, { relinearize = rlk, rescale = true }) end
    local prog = ex.CudaGraphProgram.capture(f, { example_inputs = { a, b }, warmup = 1 })
    local got = prog:replay({ a, b }, { copy_output = true })
    assert.is_true(fh.equal(got.data, f(a, b).data))
    prog:close()
  end)

  it("refuses bad options and operands before launching anything", function()
    local e = fh.CkksEngine(params(12, { 60 }), { seed = 5 })
    local sk = e:create_secret_key()
    local pk = e:create_public_key(sk)
    local rlk = e:create_relinearization_key(sk)
    local ct = e:coefficient_domain_to_ntt_domain(e:encrypt_message(0.5, pk))
    local top = ct
    while top.level < e.context.max_level do top = e:rescale_to_next_level(top) end
    local other = fh.CkksEngine(params(12, { 60, 60 }), { seed = 6 })
    local other_rlk = other:create_relinearization_key(other:create_secret_key())
    local coef = e:encrypt_message(0.5, pk)
    local before = fh.core.info().launches
    H.expect_error("ValueError", "^CkksEngine:multiply: unknown option 'relin' %(expected relinearize, rescale%)",
      e.multiply, e, ct, ct, { relin = rlk })
    H.expect_error("TypeError", "^CkksEngine:multiply: option 'relinearize' expected a CKKS value %(a "
      .. "RelinearizationKey%), got number", e.multiply, e, ct, ct, { relinearize = 3 })
    H.expect_error("TypeError", "^CkksEngine:multiply: option 'rescale' expected a boolean, got string",
      e.multiply, e, ct, ct, { relinearize = rlk, rescale = "yes" })
    H.expect_error("ValueError", "^CkksEngine:multiply: option 'rescale' needs option 'relinearize'",
      e.multiply, e, ct, ct, { rescale = true })
    H.expect_error("TypeError", "^CkksEngine:multiply: argument 3 %(options%) expected an options table, got number",
      e.multiply, e, ct, ct, 7)
    H.expect_error("TypeError", "^CkksEngine:multiply: relinearize expected a RelinearizationKey, got a PublicKey",
      e.multiply, e, ct, ct, { relinearize = pk })
    H.expect_error("StateError", "^CkksEngine:multiply: context_id of relinearize is", e.multiply, e, ct, ct,
      { relinearize = other_rlk })
    H.expect_error("StateError", "^CkksEngine:multiply: rescale = true needs a prime to drop, but the level of a is "
      .. top.level .. ", already max_level " .. e.context.max_level,
      e.multiply, e, top, top, { relinearize = rlk, rescale = true })
    H.expect_error("StateError", "^CkksEngine:multiply: .*level", e.multiply, e, ct, top, { relinearize = rlk })
    H.expect_error("StateError", "^CkksEngine:multiply: .*domain", e.multiply, e, coef, ct, { relinearize = rlk })
    assert.are.equal(before, fh.core.info().launches, "nothing was launched")
    -- no relinearize: the plain product, three components
    assert.are.equal(3, e:multiply(ct, ct, {}).num_components)
    assert.is_true(fh.equal(e:multiply(ct, ct, { rescale = false }).data, e:multiply(ct, ct).data))
  end)
end)
