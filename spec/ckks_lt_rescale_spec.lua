-- engine:linear_transform(ct, steps, plaintexts [, keys], {rescale = true}): the linear
-- transform and the rescale in one mod-down (docs/ckks.md, "Relinearize and rescale in one
-- mod-down"), word for word rescale_to_next_level(linear_transform(...)). N > 2^11 takes the
-- fused mod-down without an addend (FH_K_CKKS_MODDOWN with rescale, v0 NULL); smaller rings
-- run the two operations in turn.
local fh = require "fhelium"
local ex = require "fhelium.execution"
local H = require "spec.helpers"

local params = H.ckks_params

local function diagonals(e, g, n, S)
  local d, pts = {}, {}
  for i = 1, n do
    local t = fh.rand({ S }, { dtype = "float64", generator = g }) - 0.5
    d[i] = t:tolist()
    pts[i] = e:prepare_plaintext_for_multiplication(e:encode(t:to(e.device), { basis = "QP" }))
  end
  return d, pts
end

-- the fused and the sequential words, levels, scales and shapes agree, and the result decrypts;
-- returns the fused results (for the device comparison)
local function check(device, log_n, p_bits, batch)
  local seed = H.seed(("lt rescale %d %d %d"):format(log_n, #p_bits, batch))
  local e = fh.CkksEngine(params(log_n, p_bits), { device = device, seed = seed })
  local sk = e:create_secret_key()
  local pk = e:create_public_key(sk)
  local steps = { 0, 1, -3, 1 }
  local rks = {}
  for _, r in ipairs { 1, -3 } do rks[r] = e:create_rotation_key(sk, r) end
  local S = e.context.num_slots
  local g = fh.Generator(seed)
  local shape = batch > 1 and { batch, S } or { S }
  local m = fh.rand(shape, { dtype = "float64", generator = g }) - 0.5
  local ct = e:coefficient_domain_to_ntt_domain(e:encrypt_message(m:to(device), pk))
  local d, pts = diagonals(e, g, #steps, S)
  local out = {}
  for _, start in ipairs { 0, 1 } do
    local x, p = ct, pts
    if start == 1 then
      x = e:rescale_to_next_level(ct)
      _, p = diagonals(e, fh.Generator(seed + 1), #steps, S)
      for i = 1, #p do p[i] = e:prepare_plaintext_for_multiplication(e:encode(d[i], { basis = "QP", level = 1 })) end
    end
    local fused = e:linear_transform(x, steps, p, { rescale = true })
    local seq = e:rescale_to_next_level(e:linear_transform(x, steps, p))
    local what = ("log_n %d, %d P, batch %d, level %d"):format(log_n, #p_bits, batch, start)
    assert.is_true(fh.equal(fused.data, seq.data), what .. ": the words of linear_transform then rescale")
    assert.are.equal(seq.level, fused.level, what)
    assert.are.equal(start + 1, fused.level, what)
    assert.are.equal(seq.scale, fused.scale, what)
    assert.are.equal("ntt", fused.polynomial_domain, what)
    assert.are.same(seq.data.shape, fused.data.shape, what)
    out[#out + 1] = fused
    if start == 0 then
      -- the same call with the keys given and the options sixth
      local keys = {}
      for i, r in ipairs(steps) do keys[i] = rks[r] or false end
      local again = e:linear_transform(x, steps, p, keys, { rescale = true })
      assert.is_true(fh.equal(again.data, fused.data), what .. ": keys given, options sixth")
      local got = e:decrypt_message(fused, sk, { is_real = true }):cpu()
      local want = fh.zeros(shape, { dtype = "float64" })
      local ml = m:tolist()
      local wl = want:tolist()
      for b = 1, batch do
        local mb = batch > 1 and ml[b] or ml
        local wb = batch > 1 and wl[b] or wl
        for j = 1, S do
          local s = 0
          for i, r in ipairs(steps) do s = s + d[i][j] * mb[(j - 1 - r) % S + 1] end
          wb[j] = s
        end
      end
      local err = fh.max_abs_diff(got, fh.tensor(wl, { dtype = "float64" }))
      assert.is_true(err < 1e-5, what .. ": decryption error " .. err)
    end
  end
  return out
end

describe("CkksEngine:linear_transform with rescale = true", function()
  for _, c in ipairs { { 12, { 60 }, 1 }, { 12, { 60, 60 }, 2 }, { 13, { 60 }, 1 }, { 10, { 60, 60 }, 1 } } do
    it(("gives rescale_to_next_level(linear_transform(...)) bit for bit (cpu, log_n %d, %d P primes, batch %d)"):format(
      c[1], #c[2], c[3]), function() check("cpu", c[1], c[2], c[3]) end)
  end

  H.gpu_it("gives the CPU's words on cuda:0 (log_n 12 and 13, 1 and 2 P primes), eager and replayed", function()
    for _, c in ipairs { { 12, { 60 }, 1 }, { 13, { 60, 60 }, 2 } } do
      local cpu = check("cpu", c[1], c[2], c[3])
      local gpu = check("cuda:0", c[1], c[2], c[3])
      for i = 1, #cpu do
        assert.is_true(fh.equal(cpu[i].data, gpu[i].data:cpu()), ("log_n %d, result %d: cuda:0 against the CPU"):format(c[1], i))
      end
    end
    local e = fh.CkksEngine(params(13, { 60 }), { device = "cuda:0", seed = 7 })
    local sk = e:create_secret_key()
    local pk = e:create_public_key(sk)
    e:create_rotation_key(sk, 2)
    local S = e.context.num_slots
    local ct = e:coefficient_domain_to_ntt_domain(e:encrypt_message(fh.full({ S }, 0.25, { dtype = "float64" }):cuda(), pk))
    local _, pts = diagonals(e, fh.Generator(3), 2, S)
    local eager = e:linear_transform(ct, { 0, 2 }, pts, { rescale = true })
    local prog = ex.CudaGraphProgram.capture(function(x) return e:linear_transform(x, { 0, 2 }, pts, { rescale = true }) end,
      { example_inputs = { ct } })
    local out = prog:replay({ ct }, { copy_output = true, synchronize = true })
    assert.is_true(fh.equal(out.data:cpu(), eager.data:cpu()), "replay against eager")
    assert.are.equal(eager.level, out.level)
    prog:close()
  end)

  it("refuses bad options and a ciphertext at max_level before launching anything", function()
    local e = fh.CkksEngine(params(12, { 60 }), { seed = 5 })
    local sk = e:create_secret_key()
    local pk = e:create_public_key(sk)
    local rk = e:create_rotation_key(sk, 1)
    local S = e.context.num_slots
    local ct = e:coefficient_domain_to_ntt_domain(e:encrypt_message(0.5, pk))
    local _, pts = diagonals(e, fh.Generator(1), 1, S)
    local top = ct
    while top.level < e.context.max_level do top = e:rescale_to_next_level(top) end
    local ptop = e:prepare_plaintext_for_multiplication(e:encode(0.5, { basis = "QP", level = top.level }))
    local before = fh.core.info().launches
    local LT = "^CkksEngine:linear_transform: "
    H.expect_error("ValueError", LT .. "unknown option 'rescal' %(expected rescale%)",
      e.linear_transform, e, ct, { 1 }, pts, { rescal = true })
    H.expect_error("ValueError", LT .. "unknown option 'rescal' %(expected rescale%)",
      e.linear_transform, e, ct, { 1 }, pts, { rk }, { rescal = true })
    H.expect_error("TypeError", LT .. "option 'rescale' expected a boolean, got number",
      e.linear_transform, e, ct, { 1 }, pts, { rescale = 1 })
    H.expect_error("TypeError", LT .. "argument 5 %(options%) expected an options table, got number",
      e.linear_transform, e, ct, { 1 }, pts, { rk }, 7)
    H.expect_error("StateError", LT .. "rescale = true needs a prime to drop, but the level of ct is "
      .. top.level .. ", already max_level " .. e.context.max_level,
      e.linear_transform, e, top, { 1 }, { ptop }, { rescale = true })
    assert.are.equal(before, fh.core.info().launches, "nothing was launched")
    -- rescale = false is the plain transform
    local plain = e:linear_transform(ct, { 1 }, pts, { rescale = false })
    assert.is_true(fh.equal(plain.data, e:linear_transform(ct, { 1 }, pts).data))
    assert.are.equal(ct.level, plain.level)
  end)
end)
