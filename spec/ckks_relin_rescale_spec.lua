-- engine:relinearize(ct, rlk, {rescale = true}): the relinearization and the rescale in
-- one mod-down (docs/ckks.md, "Relinearize and rescale in one mod-down"), word for word
-- rescale_to_next_level(relinearize(ct, rlk)). N > 2^11 in the NTT domain takes the fused
-- mod-down (FH_K_CKKS_MODDOWN with rescale); smaller rings and coefficient-domain inputs
-- run the two operations in turn. The CUDA twin is in ckks_cuda_spec.lua.
local fh = require "fhelium"
local H = require "spec.helpers"

local params = H.ckks_params

-- the fused and the sequential words, levels, scales and domains agree, and the result decrypts
local function check(device, log_n, p_bits, batch)
  local seed = H.seed(("relin rescale %s %d %d %d"):format(device, log_n, #p_bits, batch))
  local e, sk, rlk, a, b, want = H.ckks_operands(device, log_n, p_bits, batch, seed)
  for _, start in ipairs { 0, 1 } do
    local x, y = a, b
    for _ = 1, start do x, y = e:rescale_to_next_level(x), e:rescale_to_next_level(y) end
    local ct3 = e:multiply(x, y)
    for _, dom in ipairs { "ntt", "coefficient" } do
      local c = dom == "ntt" and ct3 or e:ntt_domain_to_coefficient_domain(ct3)
      local fused = e:relinearize(c, rlk, { rescale = true })
      local seq = e:rescale_to_next_level(e:relinearize(c, rlk))
      local what = ("log_n %d, %d P, batch %d, level %d, %s domain"):format(log_n, #p_bits, batch, start, dom)
      assert.is_true(fh.equal(fused.data, seq.data), what .. ": the words of relinearize then rescale")
      assert.are.equal(seq.level, fused.level, what)
      assert.are.equal(start + 1, fused.level, what)
      assert.are.equal(seq.scale, fused.scale, what)
      assert.are.equal(seq.polynomial_domain, fused.polynomial_domain, what)
      assert.are.same(seq.data.shape, fused.data.shape, what)
      if start == 0 and dom == "ntt" then
        local got = e:decrypt_message(fused, sk, { is_real = true }):cpu()
        local err = fh.max_abs_diff(got, want)
        assert.is_true(err < 1e-6, what .. ": decryption error " .. err)
      end
    end
  end
end

describe("CkksEngine:relinearize with rescale = true", function()
  for _, c in ipairs { { 12, { 60 }, 1 }, { 12, { 60, 60 }, 3 }, { 13, { 60, 60 }, 1 }, { 10, { 60, 60 }, 2 } } do
    it(("gives rescale_to_next_level(relinearize(ct)) bit for bit (cpu, log_n %d, %d P primes, batch %d)"):format(
      c[1], #c[2], c[3]), function() check("cpu", c[1], c[2], c[3]) end)
  end

  H.gpu_it("gives rescale_to_next_level(relinearize(ct)) bit for bit on cuda:0 (log_n 12 and 13, 1 and 2 P primes)",
    function()
      check("cuda:0", 12, { 60 }, 1)
      check("cuda:0", 13, { 60, 60 }, 3)
    end)

  it("refuses bad options and a ciphertext at max_level before launching anything", function()
    local e = fh.CkksEngine(params(12, { 60 }), { seed = 5 })
    local sk = e:create_secret_key()
    local pk = e:create_public_key(sk)
    local rlk = e:create_relinearization_key(sk)
    local ct = e:coefficient_domain_to_ntt_domain(e:encrypt_message(0.5, pk))
    local ct3 = e:multiply(ct, ct)
    local top = ct
    while top.level < e.context.max_level do top = e:rescale_to_next_level(top) end
    local top3 = e:multiply(top, top)
    local before = fh.core.info().launches
    H.expect_error("ValueError", "^CkksEngine:relinearize: unknown option 'rescal' %(expected rescale%)",
      e.relinearize, e, ct3, rlk, { rescal = true })
    H.expect_error("TypeError", "^CkksEngine:relinearize: option 'rescale' expected a boolean, got number",
      e.relinearize, e, ct3, rlk, { rescale = 1 })
    H.expect_error("TypeError", "^CkksEngine:relinearize: argument 3 %(options%) expected an options table, got number",
      e.relinearize, e, ct3, rlk, 7)
    H.expect_error("StateError", "^CkksEngine:relinearize: rescale = true needs a prime to drop, but the "
      .. "level of ct is " .. top.level .. ", already max_level " .. e.context.max_level,
      e.relinearize, e, top3, rlk, { rescale = true })
    H.expect_error("StateError", "num_components", e.relinearize, e, ct, rlk, { rescale = true })
    assert.are.equal(before, fh.core.info().launches, "nothing was launched")
    -- rescale = false is the plain relinearization
    assert.is_true(fh.equal(e:relinearize(ct3, rlk, { rescale = false }).data, e:relinearize(ct3, rlk).data))
  end)
end)
