-- engine:rotate_many(ct, steps [, keys]): hoisted rotations, word for word the
-- ciphertexts of one rotate_by_step per step (docs/ckks.md "Hoisted rotations").
local fh = require "fhelium"
local ex = require "fhelium.execution"
local H = require "spec.helpers"

local small = { log_n = 10, q_bits = { 40, 40, 40, 60 }, p_bits = { 60, 60 }, scale = 2 ^ 40, allow_insecure = true }
-- N = 2^12: above 2^11 the mod-down reads c0 through each step's automorphism (no launch
-- writes it) and CUDA runs the two-kernel shapes
local larger = { log_n = 12, q_bits = { 40, 41, 40, 60 }, p_bits = { 60, 60 }, scale = 2 ^ 40, allow_insecure = true }

local function setup(device, seed, spec)
  local e = fh.CkksEngine(spec or small, { device = device, seed = seed })
  local sk = e:create_secret_key()
  local pk = e:create_public_key(sk)
  local keys = {}
  for _, r in ipairs { 1, -3, 5, 100 } do keys[r] = e:create_rotation_key(sk, r) end
  return e, sk, pk, keys
end

local function check(device, spec)
  local seed = H.seed("rotate_many " .. device)
  local e, sk, pk, keys = setup(device, seed, spec)
  local S = e.context.num_slots
  local g = fh.Generator(seed)
  local m = (fh.rand({ 3, S }, { dtype = "float64", generator = g }) - 0.5):to(device)
  -- ten rotations besides the 0: more than one launch of inner products takes (8)
  local steps = { 1, -3, 0, 5, 1 + S, 100, 1, -3, 5, 100, 1 }
  for _, dom in ipairs { "coefficient", "ntt" } do
    local ct = e:encrypt_message(m, pk) -- a batch of 3
    if dom == "ntt" then ct = e:coefficient_domain_to_ntt_domain(ct) end
    local many = e:rotate_many(ct, steps)
    assert.are.equal(#steps, #many)
    for i, r in ipairs(steps) do
      local one = e:rotate_by_step(ct, r)
      assert.is_true(fh.equal(many[i].data, one.data), ("%s domain, step %d"):format(dom, r))
      assert.are.equal(one.level, many[i].level)
      assert.are.equal(one.polynomial_domain, many[i].polynomial_domain)
    end
    -- explicit keys give the same words; false takes the engine's key (none for a step of 0)
    local with = e:rotate_many(ct, { 1, -3, 0 }, { keys[1], false, false })
    assert.is_true(fh.equal(with[1].data, many[1].data))
    assert.is_true(fh.equal(with[2].data, many[2].data))
    assert.is_true(fh.equal(with[3].data, ct.data))
    -- and the rotations decrypt to rolled messages
    local got = e:decrypt_message(many[4], sk, { is_real = true }):cpu():tolist()
    local want = m:cpu():tolist()
    for j = 1, S do assert.is_true(math.abs(got[1][j] - want[1][(j - 5 - 1) % S + 1]) < 1e-5) end
  end
end

describe("CkksEngine:rotate_many", function()
  it("gives the ciphertexts of single rotations, word for word (both domains, a batch, step 0, repeats, more steps "
    .. "than one launch of inner products takes)", function()
    check("cpu")
    check("cpu", larger)
  end)

  H.gpu_it("does the same on cuda:0", function()
    check("cuda:0")
    check("cuda:0", larger)
  end)

  it("replays inside a host program like the eager calls", function()
    local e, _, pk = setup("cpu", 7)
    local function fn(ct) return e:rotate_many(ct, { 1, 5, -3 }) end
    local S = e.context.num_slots
    local ct0 = e:encrypt_message(fh.rand({ S }, { dtype = "float64", generator = fh.Generator(1) }), pk)
    local prog = ex.HostGraphProgram.capture(fn, { example_inputs = { ct0 } })
    for i = 1, 2 do
      local ct = e:encrypt_message(fh.rand({ S }, { dtype = "float64", generator = fh.Generator(i + 1) }), pk)
      local out = prog:replay({ ct }, { copy_output = true })
      local ref = fn(ct)
      for k = 1, 3 do assert.is_true(fh.equal(out[k].data, ref[k].data)) end
    end
    prog:close()
  end)

  H.gpu_it("replays inside a CUDA graph program like the eager calls", function()
    local e, _, pk = setup("cuda:0", 8)
    local function fn(ct) return e:rotate_many(ct, { 1, 5, -3 }) end
    local S = e.context.num_slots
    local ct0 = e:encrypt_message(fh.rand({ S }, { dtype = "float64", generator = fh.Generator(1) }), pk)
    local prog = ex.CudaGraphProgram.capture(fn, { example_inputs = { ct0 } })
    for i = 1, 2 do
      local ct = e:encrypt_message(fh.rand({ S }, { dtype = "float64", generator = fh.Generator(i + 1) }), pk)
      local out = prog:replay({ ct }, { copy_output = true, synchronize = true })
      local ref = fn(ct)
      for k = 1, 3 do assert.is_true(fh.equal(out[k].data, ref[k].data)) end
    end
    prog:close()
  end)

  H.gpu_it("replays ten steps (two launches of inner products) at N = 2^12 inside a CUDA graph program, captured "
    .. "from the default stream and from a stream of its own", function()
    local e, _, pk = setup("cuda:0", 10, larger)
    local steps = { 1, -3, 5, 100, 1, -3, 5, 100, 1, 5 }
    local function fn(ct) return e:rotate_many(ct, steps) end
    local S = e.context.num_slots
    local function input(i)
      local m = fh.rand({ 2, S }, { dtype = "float64", generator = fh.Generator(i) }):to("cuda:0")
      return e:coefficient_domain_to_ntt_domain(e:encrypt_message(m, pk))
    end
    local ct0 = input(1)
    local own = fh.cuda.Stream()
    local progs = {
      ex.CudaGraphProgram.capture(fn, { example_inputs = { ct0 } }),
      fh.cuda.with_stream(own, function() return ex.CudaGraphProgram.capture(fn, { example_inputs = { ct0 } }) end),
    }
    for p, prog in ipairs(progs) do
      for i = 2, 3 do
        local ct = input(i + 10 * p)
        local out = prog:replay({ ct }, { copy_output = true, synchronize = true })
        assert.are.equal(#steps, #out)
        for k, r in ipairs(steps) do
          local one = e:rotate_by_step(ct, r)
          assert.is_true(fh.equal(out[k].data, one.data), ("program %d, replay %d, step %d"):format(p, i, r))
          assert.are.equal("ntt", out[k].polynomial_domain)
        end
      end
      prog:close()
    end
  end)

  it("checks every step's key before launching anything", function()
    local e, sk, pk, keys = setup("cpu", 9)
    local ct = e:encrypt_message(1.0, pk)
    local cn = e:coefficient_domain_to_ntt_domain(ct)
    local ct3 = e:multiply(cn, cn)
    local before = fh.core.info().launches
    H.expect_error("StateError", { "^CkksEngine:rotate_many: steps%[3%] = 2: the engine has no rotation key for step 2" },
      e.rotate_many, e, ct, { 1, 5, 2 })
    H.expect_error("StateError", { "^CkksEngine:rotate_many: step of keys%[2%] is 5 but steps%[2%] = %-3 needs step %-3" },
      e.rotate_many, e, ct, { 1, -3 }, { keys[1], keys[5] })
    H.expect_error("TypeError", "keys%[1%] expected a RotationKey or false, got number", e.rotate_many, e, ct, { 1 }, { 42 })
    H.expect_error("TypeError", "keys%[1%] expected a RotationKey, got a SecretKey", e.rotate_many, e, ct, { 1 }, { sk })
    H.expect_error("ValueError", "keys%) expected a list of 2 rotation keys", e.rotate_many, e, ct, { 1, 5 },
      { keys[1] })
    H.expect_error("ValueError", "steps is empty", e.rotate_many, e, ct, {})
    H.expect_error("TypeError", "steps%) expected a list of integers, got number", e.rotate_many, e, ct, 3)
    H.expect_error("ValueError", "steps%[1%] must be an integer", e.rotate_many, e, ct, { 1.5 })
    H.expect_error("StateError", "num_components", e.rotate_many, e, ct3, { 1 })
    assert.are.equal(before, fh.core.info().launches, "nothing was launched")
  end)
end)
