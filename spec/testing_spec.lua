-- fhelium.testing (docs/testing.md): every assertion passes and fails with
-- a message that says where and by how much; gpu_it / gpus_it / skip_it,
-- seeds and cached engines; `fhelium test` runs busted under this build.
local fh = require "fhelium"
local ex = require "fhelium.execution"
local testing = require "fhelium.testing"
local cli = require "spec.support.cli"

local THIS = "spec/testing_spec.lua"

-- the failure message of f (nil when it passed), without busted's table
local function failure(f)
  local ok, e = pcall(f)
  if ok then return nil end
  if type(e) == "table" and not fh.errors.is_error(e) and e.message then return tostring(e.message) end
  return e
end

local function fails_with(text, f)
  local msg = failure(f)
  assert(msg ~= nil, "expected the assertion to fail with: " .. text)
  assert(type(msg) == "string", "expected an assertion failure, got the error " .. tostring(msg))
  assert(msg:find(text, 1, true), ("message %q does not contain %q"):format(msg, text))
  return msg
end

local function passes(f)
  local msg = failure(f)
  assert(msg == nil, "expected the assertion to pass, it failed: " .. tostring(msg))
end

describe("assert.tensor_near", function()
  local a = fh.tensor({ { 1, 2, 3 }, { 4, 5, 6 } })

  it("passes for tensors within the tolerance, given or the dtype's default", function()
    passes(function() assert.tensor_near(a, a:clone()) end)
    passes(function() assert.tensor_near(a, a + 5e-6) end) -- float32 default: atol 1e-5
    passes(function() assert.tensor_near(a, a + 0.05, { atol = 0.1 }) end)
    passes(function() assert.tensor_near(a, a * 1.001, { atol = 0, rtol = 2e-3 }) end)
    passes(function() assert.tensor_near(a, { { 1, 2, 3 }, { 4, 5, 6 } }) end) -- Lua data, in a's dtype
    passes(function() assert.tensor_near(fh.full({ 2 }, 7), 7) end)
    passes(function() assert.tensor_near(fh.tensor({ 0 / 0, 1 }), fh.tensor({ 0 / 0, 1 }), { equal_nan = true }) end)
    passes(function() assert.tensor_near(fh.tensor({ math.huge }), fh.tensor({ math.huge })) end)
    passes(function() assert.is_not.tensor_near(a, a + 1) end)
    assert.same({ 1e-5, 1.3e-6 }, { testing.default_tolerances("float32") })
    assert.same({ 1e-7, 1e-7 }, { testing.default_tolerances("float64") })
    assert.same({ 0, 0 }, { testing.default_tolerances("uint64") })
  end)

  it("fails naming the worst index, both values, the difference and the allowance", function()
    local msg = fails_with("assert.tensor_near: 2 of 6 elements are outside atol 0.01; the worst at [2,3]: " ..
      "actual 6, expected 6.5, |diff| 0.5 (allowed 0.01)", function()
        assert.tensor_near(a, { { 1, 2.1, 3 }, { 4, 5, 6.5 } }, { atol = 0.01, rtol = 0 })
      end)
    assert.truthy(msg:find("^" .. THIS:gsub("%p", "%%%0") .. ":%d+: "), msg) -- where: the spec's line
    -- float32 values as their shortest float32 text; differences as doubles
    fails_with("1 of 6 elements is outside atol 1e-05 + rtol 1.3e-06 * |expected|; the worst at [1,2]: actual 2, " ..
      "expected 2.001, |diff| 0.0009999275207519531 (allowed 1.2601299905776979e-05)", function()
        assert.tensor_near(a, { { 1, 2.001, 3 }, { 4, 5, 6 } })
      end)
  end)

  it("names shape, dtype and device mismatches", function()
    fails_with("assert.tensor_near: actual and expected differ in shape (actual {2,3}, expected {3,2})",
      function() assert.tensor_near(a, fh.zeros({ 3, 2 })) end)
    fails_with("actual and expected differ in shape (actual {2,3}, expected {3,2}) and dtype (actual float32, " ..
      "expected float64)", function() assert.tensor_near(a, fh.zeros({ 3, 2 }, { dtype = "float64" })) end)
    fails_with("actual and expected differ in dtype (actual float32, expected float64)",
      function() assert.tensor_near(a, fh.tensor(a, { dtype = "float64" })) end)
    fails_with("actual and expected differ in shape (actual {2,3}, expected {3})",
      function() assert.tensor_near(a, { 1, 2, 3 }) end)
  end)

  testing.gpu_it("names a device mismatch", function()
    fails_with("actual and expected differ in device (actual cuda:0, expected cpu)",
      function() assert.tensor_near(a:cuda(), a) end)
    passes(function() assert.tensor_near(a:cuda(), a:cuda() + 1e-6) end)
  end)

  it("shows NaN, infinities, complex and exact 64-bit integers as they are", function()
    fails_with("1 of 2 elements is outside atol 1e-05 + rtol 1.3e-06 * |expected|; the worst at [1]: actual nan, " ..
      "expected nan, |diff| nan (allowed 1e-05) (NaN matches NaN only with equal_nan = true)",
      function() assert.tensor_near(fh.tensor({ 0 / 0, 1 }), fh.tensor({ 0 / 0, 1 })) end)
    fails_with("the worst at [2]: actual 1, expected nan", function()
      assert.tensor_near(fh.tensor({ 1, 1 }), fh.tensor({ 1, 0 / 0 }), { equal_nan = true })
    end)
    fails_with("the worst at [1]: actual inf, expected -inf, |diff| inf", function()
      assert.tensor_near(fh.tensor({ math.huge }), fh.tensor({ -math.huge }), { rtol = 1 })
    end)
    fails_with("the worst at [1]: actual 1e+30, expected inf, |diff| inf", function()
      assert.tensor_near(fh.tensor({ 1e30 }, { dtype = "float64" }), fh.tensor({ math.huge }, { dtype = "float64" }),
        { rtol = 1 })
    end)
    fails_with("1 of 2 elements is outside atol 1e-07 + rtol 1e-07 * |expected|; the worst at [2]: actual 3+4i, " ..
      "expected 3-4i, |diff| 8 (allowed 6e-07)", function()
        assert.tensor_near(fh.tensor({ { 1, 2 }, { 3, 4 } }, { dtype = "complex128" }),
          fh.tensor({ { 1, 2 }, { 3, -4 } }, { dtype = "complex128" }))
      end)
    local big = fh.tensor({ 2 ^ 62 + 1ULL, 5ULL }, { dtype = "uint64" })
    fails_with("1 of 2 elements is outside atol 0; the worst at [1]: actual 4611686018427387905, expected " ..
      "4611686018427387904, |diff| 1 (allowed 0)", function()
        assert.tensor_near(big, fh.tensor({ 2 ^ 62 + 0ULL, 5ULL }, { dtype = "uint64" }))
      end)
    passes(function() assert.tensor_near(big, fh.tensor({ 2 ^ 62 + 0ULL, 6ULL }, { dtype = "uint64" }), { atol = 1 }) end)
    fails_with("the worst at []: actual true, expected false", function()
      assert.tensor_near(fh.full({}, 1, { dtype = "bool" }), fh.full({}, 0, { dtype = "bool" }))
    end)
  end)

  it("fails negated when the tensors are near, and when actual is not a tensor", function()
    fails_with("assert.tensor_near: expected the tensors not to be near, but all 6 elements are within atol 1e-05 + " ..
      "rtol 1.3e-06 * |expected| (max |diff| 0)", function() assert.is_not.tensor_near(a, a) end)
    fails_with("assert.tensor_near: argument 1 (actual) expected a Tensor, got nil",
      function() assert.tensor_near(nil, a) end)
    fails_with("argument 1 (actual) expected a Tensor, got table", function() assert.tensor_near({ 1 }, { 1 }) end)
  end)

  it("raises an error object for bad options and unusable expected values", function()
    assert.raises_kind("ValueError", function() assert.tensor_near(a, a, { atl = 1 }) end,
      "assert.tensor_near: unknown option 'atl' (expected atol, rtol, equal_nan)")
    assert.raises_kind("ValueError", function() assert.tensor_near(a, a, { atol = -1 }) end,
      "assert.tensor_near: option 'atol' expected a finite number >= 0, got -1")
    assert.raises_kind("TypeError", function() assert.tensor_near(a, a, { rtol = "1" }) end,
      "assert.tensor_near: option 'rtol' expected a number, got string")
    assert.raises_kind("TypeError", function() assert.tensor_near(a, a, { equal_nan = 1 }) end,
      "option 'equal_nan' expected a boolean, got number")
    assert.raises_kind("TypeError", function() assert.tensor_near(a, a, 1e-3) end,
      "assert.tensor_near: argument 3 (opts) expected a table, got number")
    assert.raises_kind("TypeError", function() assert.tensor_near(a, "x") end,
      "assert.tensor_near: argument 2 (expected) expected a Tensor, a number or a nested list of numbers, got string")
    assert.raises_kind("TypeError", function() assert.tensor_near(a, { { 1, 2 }, { 3 } }) end,
      "assert.tensor_near: argument 2 (expected) is not tensor data: fh.tensor: ragged nested tables")
  end)
end)

describe("assert.decrypts_to", function()
  local engine, keys = testing.engine()
  local ct = engine:encrypt_message({ 0.5, -0.25 }, keys.pk)

  it("passes when the given slots decrypt within atol (default 1e-5)", function()
    passes(function() assert.decrypts_to(engine, ct, keys.sk, { 0.5, -0.25 }) end)
    passes(function() assert.decrypts_to(engine, ct, keys.sk, { 0.5 }) end) -- the first slot only
    passes(function() assert.decrypts_to(engine, ct, keys.sk, { 0.5, -0.2 }, { atol = 0.1 }) end)
    passes(function() assert.decrypts_to(engine, engine:encrypt_message(3, keys.pk), keys.sk, 3) end) -- every slot
    passes(function() assert.decrypts_to(engine, ct, keys.sk, fh.tensor({ 0.5, -0.25 }, { dtype = "float64" })) end)
    passes(function()
      assert.decrypts_to(engine, engine:encrypt_message({ { 1, 2 } }, keys.pk, { complex = true }), keys.sk,
        { { 1, 2 } }, { complex = true })
    end)
    passes(function() assert.is_not.decrypts_to(engine, ct, keys.sk, { 0.5, 0.25 }) end)
  end)

  it("fails naming the worst slot, its decryption, the message and the error", function()
    local msg = fails_with("assert.decrypts_to: 1 of 2 slots is off by more than atol 1e-05; the worst, slot 2, " ..
      "decrypts to -0.25", function() assert.decrypts_to(engine, ct, keys.sk, { 0.5, 0.25 }) end)
    assert.truthy(msg:find(", expected 0.25 %(|error| 0.5[0-9]*%)$"), msg)
    assert.truthy(msg:find("^" .. THIS:gsub("%p", "%%%0") .. ":%d+: "), msg)
    fails_with("512 of 512 slots are off by more than atol 1e-05; the worst, slot 2, decrypts to -0.25",
      function() assert.decrypts_to(engine, ct, keys.sk, 1) end)
    fails_with("1 of 4 slots is off by more than atol 1e-05; the worst, batch [2], slot 2, decrypts to -0.25",
      function()
        assert.decrypts_to(engine, engine:stack_batch({ ct, ct }), keys.sk, { { 0.5, -0.25 }, { 0.5, 0.25 } })
      end)
    msg = fails_with("1 of 1 slot is off by more than atol 1e-05; the worst, slot 1, decrypts to ", function()
      assert.decrypts_to(engine, engine:encrypt_message({ { 1, 2 } }, keys.pk, { complex = true }), keys.sk,
        { { 1, 2.5 } }, { complex = true })
    end)
    -- the complex decryption (1 + 2i up to the noise) and the complex message
    assert.truthy(msg:find("decrypts to [01]%.%d+%+[12]%.%d+i, expected 1%+2%.5i"), msg)
    local _, other = testing.engine(nil, { seed = 2 })
    fails_with("slots are off by more than atol 1e-05", function()
      assert.decrypts_to(engine, ct, other.sk, { 0.5, -0.25 }) -- another secret key: noise
    end)
  end)

  it("fails when the shapes cannot match or the decryption raises", function()
    fails_with("assert.decrypts_to: the ciphertext holds a batch of shape {}, the message a batch of shape {2} " ..
      "(message shape {2,2})", function() assert.decrypts_to(engine, ct, keys.sk, { { 0.5, -0.25 }, { 0.5, 0.25 } }) end)
    local long = {}
    for i = 1, 513 do long[i] = 0 end
    fails_with("assert.decrypts_to: the message has 513 slots, the ciphertext 512",
      function() assert.decrypts_to(engine, ct, keys.sk, long) end)
    fails_with("assert.decrypts_to: decryption failed: TypeError: CkksEngine:decrypt_message: argument 1 (ct) " ..
      "expected a CKKS value, got Tensor", function() assert.decrypts_to(engine, fh.zeros(2), keys.sk, 1) end)
    fails_with("assert.decrypts_to: expected a different decryption, but all 2 slots are within atol 1e-05 of the " ..
      "message (max |error| ", function() assert.is_not.decrypts_to(engine, ct, keys.sk, { 0.5, -0.25 }) end)
  end)

  it("raises an error object for a bad engine, message or option", function()
    assert.raises_kind("TypeError", function() assert.decrypts_to(nil, ct, keys.sk, 1) end,
      "assert.decrypts_to: argument 1 (engine) expected a CkksEngine, got nil")
    assert.raises_kind("TypeError", function() assert.decrypts_to(engine, ct, keys.sk, "1") end,
      "assert.decrypts_to: argument 4 (message) expected a number, a list or a tensor, got string")
    assert.raises_kind("ValueError", function() assert.decrypts_to(engine, ct, keys.sk, {}) end,
      "assert.decrypts_to: argument 4 (message) is an empty list")
    assert.raises_kind("ValueError", function() assert.decrypts_to(engine, ct, keys.sk, { { 1, 2 }, { 3 } }) end,
      "assert.decrypts_to: ragged nested tables")
    assert.raises_kind("TypeError", function() assert.decrypts_to(engine, ct, keys.sk, 1, { complex = true }) end,
      "with complex = true expected a list of {re, im} pairs, got number")
    assert.raises_kind("ValueError", function() assert.decrypts_to(engine, ct, keys.sk, 1, { tol = 1 }) end,
      "assert.decrypts_to: unknown option 'tol' (expected atol, rtol, complex)")
    assert.raises_kind("TypeError", function()
      assert.decrypts_to(engine, ct, keys.sk, fh.zeros({ 2 }, { dtype = "bool" }))
    end, "got a bool tensor")
  end)
end)

describe("assert.same_signature", function()
  local engine, keys = testing.engine()
  local ct = engine:encrypt_message({ 1, 2 }, keys.pk)
  local ct1 = engine:rescale_to_next_level(engine:coefficient_domain_to_ntt_domain(ct))
  local tree = { x = fh.zeros(2), v = { ct, fh.ones(2) } }

  it("passes for trees of the same structure and exact state, and for signatures", function()
    passes(function() assert.same_signature(tree, { x = fh.ones(2), v = { ct:clone(), fh.zeros(2) } }) end)
    local s = ex.ValueTreeSignature.from_value(tree)
    passes(function() assert.same_signature(s, tree) end)
    passes(function() assert.same_signature(ex.TensorSignature.from_tensor(fh.zeros(2)), fh.ones(2)) end)
    passes(function() assert.same_signature(ex.ValueSignature.from_value(ct), ct) end)
    passes(function() assert.is_not.same_signature(fh.zeros(2), fh.zeros(3)) end)
  end)

  it("fails naming the first differing path and field, with both values", function()
    local msg = fails_with('assert.same_signature: the signatures differ at value["v"][1], field level: 0 in a, 1 in b',
      function() assert.same_signature(tree, { x = fh.zeros(2), v = { ct1, fh.ones(2) } }) end)
    assert.truthy(msg:find("^" .. THIS:gsub("%p", "%%%0") .. ":%d+: "), msg)
    fails_with('differ at value["v"][2], field shape: {2} in a, {3} in b',
      function() assert.same_signature(tree, { x = fh.zeros(2), v = { ct, fh.ones(3) } }) end)
    fails_with('differ at value["x"], field dtype: float32 in a, float64 in b', function()
      assert.same_signature(tree, { x = fh.zeros(2, { dtype = "float64" }), v = { ct, fh.ones(2) } })
    end)
    fails_with("differ at value, field stride: {1,3} in a, {2,1} in b",
      function() assert.same_signature(fh.zeros(2, 3):transpose(1, 2), fh.zeros(3, 2)) end)
    fails_with('differ at value, field key "x": present in a, missing in b',
      function() assert.same_signature({ x = fh.zeros(2) }, { y = fh.zeros(2) }) end)
    fails_with('differ at value, field key "y": missing in a, present in b',
      function() assert.same_signature({ x = fh.zeros(2) }, { x = fh.zeros(2), y = fh.zeros(2) }) end)
    fails_with("differ at value[1], field kind: a float32 tensor of shape {2} in a, a list of length 1 in b",
      function() assert.same_signature({ fh.zeros(2) }, { { fh.zeros(2) } }) end)
    fails_with("differ at value, field kind: a tuple of length 1 in a, a list of length 1 in b",
      function() assert.same_signature(ex.tuple(fh.zeros(2)), { fh.zeros(2) }) end)
    fails_with("differ at value, field length: 1 in a, 2 in b",
      function() assert.same_signature({ fh.zeros(2) }, { fh.zeros(2), fh.zeros(2) }) end)
    fails_with("differ at value[1], field type_name: Ciphertext in a, PublicKey in b",
      function() assert.same_signature({ ct }, { keys.pk }) end)
    fails_with("differ at value[1], field polynomial_domain: coefficient in a, ntt in b",
      function() assert.same_signature({ ct }, { engine:coefficient_domain_to_ntt_domain(ct) }) end)
    fails_with("differ at value, field tensor 'data' shape: {2,4,1024} in a, {2,2,4,1024} in b",
      function() assert.same_signature(ct, engine:stack_batch({ ct, ct })) end)
    local _, other = testing.engine({ log_n = 10, q_bits = { 40, 40, 60 }, p_bits = { 60 }, allow_insecure = true })
    fails_with("differ at value, field context_id: ", function() assert.same_signature(keys.sk, other.sk) end)
  end)

  it("fails for what is not a value tree, and negated for equal signatures", function()
    fails_with("assert.same_signature: argument 1 (a) is neither a signature nor a value tree: TypeError: " ..
      "ex.ValueTreeSignature.from_value: value[1]: unsupported leaf", function() assert.same_signature({ 1 }, {}) end)
    fails_with("assert.same_signature: argument 2 (b) is neither a signature nor a value tree",
      function() assert.same_signature({}, "x") end)
    fails_with("assert.same_signature: expected different signatures, both are ValueTreeSignature(tensor(float32," ..
      "shape={2}", function() assert.is_not.same_signature(fh.zeros(2), fh.ones(2)) end)
  end)
end)

describe("assert.raises_kind", function()
  local function bad_device() fh.zeros({ 2 }, { device = "gpu" }) end

  it("passes for the kind or an ancestor with the needle in the message, and returns the error", function()
    local err = assert.raises_kind("ValueError", bad_device, "invalid device string 'gpu'")
    assert.equal("ValueError", err.kind)
    assert.equal("fh.zeros: invalid device string 'gpu' (expected \"cpu\", \"cuda\" or \"cuda:N\")", err.message)
    passes(function() assert.raises_kind("FHEliumError", bad_device) end)
    passes(function() assert.raises_kind("ValueError", bad_device, "(expected \"cpu\"") end) -- plain text, no pattern
    passes(function()
      assert.raises_kind("ExecutionInputError", function()
        fh.errors.raise("CudaGraphInputError", "replay: inputs[1]: mismatch")
      end, "inputs[1]")
    end)
    passes(function() assert.is_not.raises_kind("TypeError", bad_device) end)
  end)

  it("fails for a string error, another kind, no error and a missing needle", function()
    local msg = fails_with("assert.raises_kind: expected an fhelium error object (a ValueError), got a string " ..
      "error: ", function() assert.raises_kind("ValueError", function() error("boom") end) end)
    assert.truthy(msg:find("boom", 1, true), msg)
    assert.truthy(msg:find("^" .. THIS:gsub("%p", "%%%0") .. ":%d+: "), msg)
    fails_with("expected an fhelium error object (a ValueError), got a table error: ",
      function() assert.raises_kind("ValueError", function() error({ kind = "ValueError", message = "x" }) end) end)
    fails_with("assert.raises_kind: expected a TypeError (or a descendant of TypeError), got ValueError: fh.zeros: " ..
      "invalid device string 'gpu'", function() assert.raises_kind("TypeError", bad_device) end)
    fails_with("assert.raises_kind: expected a ValueError, but the function returned without an error",
      function() assert.raises_kind("ValueError", function() end) end)
    fails_with("assert.raises_kind: expected a ValueError whose message contains 'cuda:9', got ValueError: fh.zeros:",
      function() assert.raises_kind("ValueError", bad_device, "cuda:9") end)
    fails_with("assert.raises_kind: expected no FHEliumError, got ValueError: fh.zeros: invalid device",
      function() assert.is_not.raises_kind("FHEliumError", bad_device) end)
  end)

  it("raises an error object for an unknown kind, a non-function and a non-string needle", function()
    assert.raises_kind("ValueError", function() assert.raises_kind("Bogus", bad_device) end,
      "assert.raises_kind: argument 1 (kind) expected one of FHEliumError, ValueError, ")
    assert.raises_kind("ValueError", function() assert.raises_kind(nil, bad_device) end,
      "argument 1 (kind) expected one of FHEliumError, ")
    assert.raises_kind("TypeError", function() assert.raises_kind("ValueError", 1) end,
      "assert.raises_kind: argument 2 (fn) expected a function, got number")
    assert.raises_kind("TypeError", function() assert.raises_kind("ValueError", bad_device, 3) end,
      "assert.raises_kind: argument 3 (needle) expected a string, got number")
  end)
end)

describe("testing.gpu_it, gpus_it and skip_it", function()
  -- calls `f` as a spec file would, with a recording `it` and `pending`
  local function declare(f)
    local got = {}
    local env = setmetatable({
      it = function(name, fn) got[#got + 1] = { "it", name, fn } end,
      pending = function(name) got[#got + 1] = { "pending", name } end,
    }, { __index = _G })
    setfenv(f, env)()
    return got
  end
  local reason = fh.cuda.is_available() and "" or fh.cuda.unavailable_reason()

  it("declare a #gpu spec that runs with a GPU and is skipped with the reason without one", function()
    local ran = false
    local got = declare(function() testing.gpu_it("uses a GPU", function() ran = true end) end)
    assert.equal(1, #got)
    if testing.has_gpu() then
      assert.same({ "it", "uses a GPU #gpu" }, { got[1][1], got[1][2] })
      got[1][3]()
      assert.is_true(ran)
    else
      assert.same({ "pending", "uses a GPU #gpu (skipped: needs a CUDA device: " .. reason .. ")" }, got[1])
    end
    got = declare(function() testing.gpus_it(64, "uses 64 GPUs", function() end) end)
    if testing.has_gpu() then
      assert.same({ "pending", ("uses 64 GPUs #gpu (skipped: needs 64 CUDA devices, %d present)")
        :format(fh.cuda.device_count()) }, got[1])
    else
      assert.same({ "pending", "uses 64 GPUs #gpu (skipped: needs a CUDA device: " .. reason .. ")" }, got[1])
    end
    assert.same({ { "pending", "later (skipped: a reason)" } },
      declare(function() testing.skip_it("later", "a reason") end))
  end)

  it("fail instead under testing.require_gpu when no CUDA device is usable", function()
    local saved = testing.require_gpu
    testing.require_gpu = true
    finally(function() testing.require_gpu = saved end)
    local got = declare(function()
      testing.gpu_it("uses a GPU", function() end)
      testing.gpus_it(64, "uses 64 GPUs", function() end)
    end)
    if testing.has_gpu() then
      assert.same({ "it", "pending" }, { got[1][1], got[2][1] }) -- one GPU is enough to run, not to fail
    else
      for i, fname in ipairs { "testing.gpu_it", "testing.gpus_it" } do
        assert.equal("it", got[i][1])
        local ok, err = pcall(got[i][3])
        assert.is_false(ok)
        assert.equal(fname .. ": a GPU is required (--gpu or FHELIUM_REQUIRE_GPU=1), but this spec needs a CUDA " ..
          "device: " .. reason, err)
      end
    end
  end)

  it("raise an error object for bad arguments and outside a spec file", function()
    assert.raises_kind("ValueError", function() declare(function() testing.gpus_it(0, "x", function() end) end) end,
      "testing.gpus_it: argument 1 (n) expected a positive integer, got 0")
    assert.raises_kind("ValueError", function() declare(function() testing.gpus_it(1.5, "x", function() end) end) end,
      "testing.gpus_it: argument 1 (n) expected a positive integer, got 1.5")
    assert.raises_kind("TypeError", function() declare(function() testing.gpus_it("2", "x", function() end) end) end,
      "testing.gpus_it: argument 1 (n) expected a positive integer, got string")
    assert.raises_kind("TypeError", function() declare(function() testing.gpu_it(1, function() end) end) end,
      "testing.gpu_it: argument 1 (name) expected a string, got number")
    assert.raises_kind("TypeError", function() declare(function() testing.gpu_it("x") end) end,
      "testing.gpu_it: argument 2 (fn) expected a function, got nil")
    assert.raises_kind("TypeError", function() declare(function() testing.gpus_it(2, "x", 1) end) end,
      "testing.gpus_it: argument 3 (fn) expected a function, got number")
    assert.raises_kind("TypeError", function() declare(function() testing.skip_it("x") end) end,
      "testing.skip_it: argument 2 (reason) expected a string, got nil")
    local outside = setfenv(function() return testing.skip_it("x", "y") end, {})
    assert.raises_kind("StateError", outside, "testing.skip_it: no busted `it` in the caller's environment")
  end)
end)

describe("testing.seed", function()
  it("is the same number for one label within a spec and differs by label", function()
    local a = testing.seed("seed spec a")
    assert.equal(a, testing.seed("seed spec a"))
    assert.is_true(a >= 1 and a < 2 ^ 31 and a == math.floor(a))
    assert.equal("number", type(testing.seed())) -- the spec's name as the label
    assert.raises_kind("TypeError", function() testing.seed(1) end, "testing.seed: argument 1 (label) expected a " ..
      "string, got number")
  end)
end)

describe("testing.engine", function()
  it("is a cached, seeded engine with its keys", function()
    local e, k = testing.engine()
    local e2, k2 = testing.engine(nil, { seed = 1 })
    assert.equal(e, e2)
    assert.equal(k, k2)
    assert.is_true(e.seeded)
    assert.equal(1024, e.context.ring_degree)
    assert.same({ "SecretKey", "PublicKey", "RelinearizationKey" }, { k.sk.type, k.pk.type, k.rlk.type })
    local e3, k3 = testing.engine(testing.small, { relin = false, rotations = { 1, -2 }, conjugation = true })
    assert.are_not.equal(e, e3)
    assert.is_nil(k3.rlk)
    assert.same({ 1, -2 }, { k3.rotation[1].step, k3.rotation[-2].step })
    assert.equal("ConjugationKey", k3.conjugation.type)
    local ct = e3:coefficient_domain_to_ntt_domain(e3:encrypt_message({ 1, 2, 3 }, k3.pk))
    assert.decrypts_to(e3, e3:rotate_by_step(ct, 1), k3.sk, { 0, 1, 2, 3 }, { atol = 1e-6 })
    assert.are_not.equal(e, (testing.engine(nil, { seed = 2 })))
  end)

  it("is deterministic for its seed: the same keys as a fresh engine", function()
    local _, k = testing.engine(nil, { seed = 7 })
    local fresh = fh.CkksEngine(testing.small, { seed = 7 })
    local sk = fresh:create_secret_key()
    assert.tensor_near(k.sk.data, sk.data)
    assert.tensor_near(k.pk.data, fresh:create_public_key(sk).data)
  end)

  it("raises an error object for bad options", function()
    assert.raises_kind("ValueError", function() testing.engine(nil, { rotation = { 1 } }) end,
      "testing.engine: unknown option 'rotation' (expected device, seed, relin, rotations, conjugation)")
    assert.raises_kind("TypeError", function() testing.engine(nil, { seed = "1" }) end,
      "testing.engine: option 'seed' expected an integer, got string")
    assert.raises_kind("TypeError", function() testing.engine(nil, { rotations = 3 }) end,
      "testing.engine: option 'rotations' expected a list of steps, got number")
    assert.raises_kind("TypeError", function() testing.engine(nil, { rotations = { 0.5 } }) end,
      "testing.engine: option 'rotations'[1] expected an integer step, got 0.5")
    assert.raises_kind("TypeError", function() testing.engine(nil, { relin = 1 }) end,
      "testing.engine: option 'relin' expected a boolean, got number")
    assert.raises_kind("ValueError", function() testing.engine("no-such-preset") end, "fh.CkksEngine")
  end)
end)

-- ---- fhelium test ----------------------------------------------------------------

local FIXTURE = "spec/fixtures/testing_fixture.lua"
local clean_env = { FHELIUM_TEST_VERBOSE = false, FHELIUM_REQUIRE_GPU = false, FHELIUM_SEED = false, CI = "true" }
local function fhelium_test(args, env, cwd)
  local e = {}
  for k, v in pairs(clean_env) do e[k] = v end
  for k, v in pairs(env or {}) do e[k] = v end
  local r = cli.run(args, { cwd = cwd or cli.root, env = e })
  local lines = cli.lines(r.stdout)
  r.last = lines[#lines]
  return r
end

describe("fhelium test", function()
  it("runs busted under this build with the skip report and the summary line", function()
    local r = fhelium_test({ "test", FIXTURE })
    local out = r.stdout .. r.stderr
    assert.equal(0, r.code, out)
    assert.equal(testing.has_gpu() and "4 passed, 0 failed, 2 skipped" or "3 passed, 0 failed, 3 skipped", r.last)
    assert.truthy(r.stdout:find("  1 x a reason of its own\n", 1, true), out)
    if not testing.has_gpu() then
      assert.truthy(r.stdout:find("  2 x needs a CUDA device: " .. fh.cuda.unavailable_reason() .. "\n", 1, true), out)
    end
    -- require "fhelium" is the build's: its Lua files and the linked-in core
    assert.truthy(r.stdout:find("FHELIUM @" .. cli.root .. "/lua/fhelium/init.lua\n", 1, true), out)
    assert.truthy(r.stdout:find("CORE preloaded true\n", 1, true), out)
  end)

  it("needs no LUA_PATH or LUA_CPATH, nor the project's .busted", function()
    local dir = os.tmpname()
    os.remove(dir)
    assert.equal(0, cli.sh("mkdir -p " .. cli.quote(dir)).code)
    finally(function() cli.sh("rm -rf " .. cli.quote(dir)) end)
    local r = fhelium_test({ "test", cli.root .. "/" .. FIXTURE }, { LUA_PATH = false, LUA_CPATH = false }, dir)
    assert.equal(0, r.code, r.stdout .. r.stderr)
    assert.truthy(r.last:find("^%d passed, 0 failed, %d skipped$"), r.last)
    assert.truthy(r.stdout:find("FHELIUM @" .. cli.root .. "/lua/fhelium/init.lua\n", 1, true), r.stdout)
  end)

  it("finds busted beside the busted command on PATH when package.path lacks it", function()
    -- a prefix of our own: bin/busted and share/lua/5.1 holding (links to)
    -- every Lua module of the busted in use; package.path names none of it
    local runner = package.searchpath("busted.runner", package.path)
    assert.truthy(runner, "busted.runner is on this spec's package.path")
    local share = runner:match("^(.*)/busted/runner%.lua$")
    local prefix = os.tmpname()
    os.remove(prefix)
    finally(function() cli.sh("rm -rf " .. cli.quote(prefix)) end)
    local q = cli.quote
    assert.equal(0, cli.sh(("mkdir -p %s/bin %s/share/lua/5.1 && printf '#!/bin/sh\\n' > %s/bin/busted && "
      .. "chmod +x %s/bin/busted && for m in %s/*; do ln -s \"$m\" %s/share/lua/5.1/; done")
      :format(q(prefix), q(prefix), q(prefix), q(prefix), q(share), q(prefix))).code)
    local env = { LUA_PATH = "./?.lua", PATH = prefix .. "/bin:" .. (os.getenv("PATH") or "") }
    local r = fhelium_test({ "test", cli.root .. "/" .. FIXTURE }, env, prefix)
    assert.equal(0, r.code, r.stdout .. r.stderr)
    assert.truthy(r.last:find("^%d passed, 0 failed, %d skipped$"), r.last)
    -- without the command on PATH the same run cannot find busted
    env.PATH = prefix .. "/share"
    r = fhelium_test({ "test", cli.root .. "/" .. FIXTURE }, env, prefix)
    assert.equal(1, r.code, r.stdout .. r.stderr)
    assert.truthy(r.stderr:find("busted is not installed or not on package.path", 1, true), r.stderr)
  end)

  it("prints one seed per spec and label, and replays FHELIUM_SEED", function()
    local r = fhelium_test({ "test", FIXTURE })
    local s1, s2 = r.stdout:match("SEED1 (%d+)"), r.stdout:match("SEED2 (%d+)")
    assert.truthy(s1 and s2, r.stdout)
    assert.are_not.equal(s1, s2) -- fresh seeds: equal once in 2^31 runs
    local printed = {}
    for s in r.stderr:gmatch("%[seed fixture: (%d+)%]\n") do printed[#printed + 1] = s end
    assert.same({ s1, s2 }, printed)
    r = fhelium_test({ "test", FIXTURE }, { FHELIUM_SEED = "42" })
    assert.same({ "42", "42" }, { r.stdout:match("SEED1 (%d+)"), r.stdout:match("SEED2 (%d+)") })
    r = fhelium_test({ "test", FIXTURE }, { FHELIUM_SEED = "x" })
    assert.equal(1, r.code)
    assert.truthy(r.stdout:find("testing.seed: FHELIUM_SEED expected a non-negative integer, got 'x'", 1, true))
  end)

  it("lists each skip with its file and line with --verbose-skips", function()
    local r = fhelium_test({ "test", "--verbose-skips", FIXTURE })
    assert.equal(0, r.code, r.stdout .. r.stderr)
    assert.truthy(r.stdout:find("  1 x a reason of its own\n      " .. FIXTURE .. ":9  fixture is skipped on purpose\n",
      1, true), r.stdout)
    assert.truthy(r.stdout:find("      " .. FIXTURE .. ":8  fixture uses 64 GPUs #gpu\n", 1, true), r.stdout)
    if not testing.has_gpu() then
      assert.truthy(r.stdout:find("      " .. FIXTURE .. ":7  fixture uses a GPU #gpu\n", 1, true), r.stdout)
    end
  end)

  it("fails the specs that need a GPU under FHELIUM_REQUIRE_GPU=1, and --gpu without one at once", function()
    if testing.has_gpu() then
      local r = fhelium_test({ "test", "--gpu", FIXTURE })
      assert.equal(0, r.code, r.stdout .. r.stderr)
      return
    end
    local r = fhelium_test({ "test", FIXTURE }, { FHELIUM_REQUIRE_GPU = "1" })
    assert.equal(1, r.code)
    assert.equal("3 passed, 2 failed, 1 skipped", r.last)
    assert.truthy(r.stdout:find("testing.gpu_it: a GPU is required (--gpu or FHELIUM_REQUIRE_GPU=1)", 1, true), r.stdout)
    r = fhelium_test({ "test", "--gpu", FIXTURE })
    assert.equal(1, r.code)
    assert.equal("0 passed, 1 failed, 0 skipped", r.last)
    assert.equal("fhelium test: --gpu: no usable CUDA device: " .. fh.cuda.unavailable_reason() .. "\n", r.stderr)
  end)

  it("exits 1 with the failure's file, line and message when a spec fails", function()
    local r = fhelium_test({ "test", "spec/fixtures/testing_failing_fixture.lua" })
    assert.equal(1, r.code)
    assert.equal("1 passed, 1 failed, 0 skipped", r.last)
    assert.truthy(r.stdout:find("spec/fixtures/testing_failing_fixture.lua:5: assert.tensor_near: 1 of 3 elements " ..
      "is outside atol 1e-05 + rtol 1.3e-06 * |expected|; the worst at [3]: actual 3, expected 3.5", 1, true),
      r.stdout)
  end)

  it("says when busted cannot be found, keeping the last line", function()
    -- (and no busted command on PATH, beside which it would look too)
    local r = fhelium_test({ "test", FIXTURE }, { LUA_PATH = "/nonexistent/?.lua", LUA_CPATH = "/nonexistent/?.so",
      PATH = "/nonexistent" })
    assert.equal(1, r.code)
    assert.equal("0 passed, 1 failed, 0 skipped", r.last)
    assert.truthy(r.stderr:find("^fhelium test: busted is not installed or not on package.path %(Debian: apt%-get " ..
      "install lua%-busted%)"), r.stderr)
  end)

  it("prints its own options before busted's with --help", function()
    local r = fhelium_test({ "test", "--help" })
    assert.equal(0, r.code, r.stderr)
    assert.truthy(r.stdout:find("^usage: fhelium test %[%-%-gpu%] %[%-%-verbose%-skips%]"), r.stdout)
    assert.truthy(r.stdout:find("Usage: fhelium test [OPTIONS] [--] [ROOT-1 [ROOT-2 [...]]]", 1, true), r.stdout)
  end)

  it("leaves a script named test to `fhelium ./test` and `fhelium -- test`", function()
    local dir = os.tmpname()
    os.remove(dir)
    assert.equal(0, cli.sh("mkdir -p " .. cli.quote(dir)).code)
    finally(function() cli.sh("rm -rf " .. cli.quote(dir)) end)
    local f = assert(io.open(dir .. "/test", "w"))
    f:write("print('the script named test', ...)\n")
    f:close()
    for _, args in ipairs { { "./test", "a" }, { "--", "test", "a" } } do
      local r = cli.run(args, { cwd = dir })
      assert.equal(0, r.code, r.stderr)
      assert.equal("the script named test\ta\n", r.stdout)
    end
  end)
end)

describe("examples/spec", function()
  it("passes with `fhelium test examples/spec`", function()
    local r = fhelium_test({ "test", "examples/spec" })
    assert.equal(0, r.code, r.stdout .. r.stderr)
    assert.truthy(r.last:match("^(%d+) passed, 0 failed, %d skipped$"), r.last)
    assert.is_true(tonumber(r.last:match("^(%d+)")) >= 3, r.last)
  end)

  it("passes copied into a project of its own (the program, spec/, no .busted)", function()
    local dir = os.tmpname()
    os.remove(dir)
    assert.equal(0, cli.sh(("mkdir -p %s/spec && cp %s/examples/spec/*_spec.lua %s/spec/ && cp %s/examples/matvec.lua %s/")
      :format(cli.quote(dir), cli.quote(cli.root), cli.quote(dir), cli.quote(cli.root), cli.quote(dir))).code)
    finally(function() cli.sh("rm -rf " .. cli.quote(dir)) end)
    local r = fhelium_test({ "test" }, { LUA_PATH = false, LUA_CPATH = false }, dir)
    assert.equal(0, r.code, r.stdout .. r.stderr)
    assert.truthy(r.last:match("^%d+ passed, 0 failed, %d skipped$"), r.last)
  end)
end)
