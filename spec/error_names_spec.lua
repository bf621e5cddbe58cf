-- README "Errors": every message begins with the name of the function the
-- user called, as the documentation writes the call (fh.full, fh.cuda.Stream,
-- Tensor:expand, Ciphertext:to, CkksEngine:add, ex.tuple,
-- HostGraphProgram:replay, Tensor.__add for `a + b`), then names the
-- argument, what was expected and what came. This walks a table of bad
-- calls over every area and checks the name, that it is not doubled (no
-- "CkksEngine:add: add: ...") and the error's kind.
local fh = require "fhelium"
local H = require "spec.helpers"
local ex = require "fhelium.execution"

local t = fh.zeros({ 2, 3 }, { dtype = "float64" })
local u = fh.zeros({ 2 }, { dtype = "uint64" })
local e = fh.CkksEngine({ log_n = 10, q_bits = { 40, 40, 60 }, p_bits = { 60 }, scale = 2 ^ 40, allow_insecure = true },
  { seed = 3 })
local sk = e:create_secret_key()
local pk = e:create_public_key(sk)
local ct = e:encrypt_message({ 1, 2 }, pk)
local ct_ntt = e:coefficient_domain_to_ntt_domain(ct)
local pt = e:encode({ 1 })
local ctx = e.context
local hp = ex.HostGraphProgram.capture(function(x) return x + 1 end, { example_inputs = { t }, warmup = 0 })
local closed = ex.HostGraphProgram.capture(function(x) return x * 2 end, { example_inputs = { t }, warmup = 0 })
closed:close()
local buf = ex.ReusableValueBuffer.like({ t })
local handle = buf:copy_from({ t })
local tsig = ex.TensorSignature.from_tensor(t)
local tree_sig = ex.ValueTreeSignature.from_value({ t })
local gen = fh.Generator(1)
local function f() end

-- { name, kind, function, arguments... }
local cases = {
  -- tensors: creation
  { "fh.tensor", "ValueError", fh.tensor, { { 1, 2 }, { 3 } } },
  { "fh.tensor", "TypeError", fh.tensor, { 1, "x" } },
  { "fh.tensor", "ValueError", fh.tensor, { 1 }, { dtype = "half" } },
  { "fh.zeros", "ValueError", fh.zeros, { -2 } },
  { "fh.zeros", "ValueError", fh.zeros, { 2 }, { device = "gpu" } },
  { "fh.zeros", "ValueError", fh.zeros, { 2 }, { bogus = true } },
  { "fh.ones", "TypeError", fh.ones, { "a" } },
  { "fh.empty", "MemoryError", fh.empty, { 2 ^ 49 } },
  { "fh.full", "TypeError", fh.full, { 2 }, "x" },
  { "fh.full", "ValueError", fh.full, { 2 }, 2 ^ 64, { dtype = "uint64" } },
  { "fh.full", "ValueError", fh.full, { 2 }, 1.5, { dtype = "int32" } },
  { "fh.arange", "TypeError", fh.arange, "a" },
  { "fh.arange", "ValueError", fh.arange, 0, 1, 0 },
  { "fh.rand", "TypeError", fh.rand, { 2 }, { generator = 1 } },
  { "fh.randn", "TypeError", fh.randn, { 2 }, { dtype = "int32" } },
  { "fh.Generator", "TypeError", fh.Generator, "x" },
  -- tensors: methods
  { "Tensor:expand", "ValueError", t.expand, t, { 3 } },
  { "Tensor:expand", "ValueError", t.expand, t, { 4, 3 } },
  { "Tensor:fill_", "TypeError", t.fill_, t, "x" },
  { "Tensor:fill_", "ValueError", u.fill_, u, -1 },
  { "Tensor:to", "ValueError", t.to, t, "gpu" },
  { "Tensor:to", "TypeError", t.to, t, 3 },
  { "Tensor:select", "ValueError", t.select, t, 1, 1.5 },
  { "Tensor:select", "ValueError", t.select, t, 1, 5 },
  { "Tensor:narrow", "ValueError", t.narrow, t, 1, 2, 2 },
  { "Tensor:transpose", "ValueError", t.transpose, t, 1, 1.5 },
  { "Tensor:transpose", "ValueError", t.transpose, t, 1, 3 },
  { "Tensor:view", "ValueError", t.view, t, { 7 } },
  { "Tensor:reshape", "ValueError", t.reshape, t, { 5 } },
  { "Tensor:permute", "ValueError", t.permute, t, 1 },
  { "Tensor:copy_", "TypeError", t.copy_, t, 1 },
  { "Tensor:copy_", "ValueError", t.copy_, t, fh.zeros({ 3 }) },
  { "Tensor:item", "ValueError", t.item, t },
  { "Tensor:stride", "ValueError", t.stride, t, 3 },
  { "Tensor:add_", "TypeError", t.add_, t, "x" },
  { "Tensor:view", "TypeError", t.view, 5, 2 },
  { "Tensor.__add", "TypeError", function() return t + "x" end },
  { "Tensor.__mul", "ValueError", function() return t * fh.zeros({ 4 }, { dtype = "float64" }) end },
  { "Tensor.__index", "ValueError", function() return t[1.5] end },
  { "Tensor.__newindex", "TypeError", function() t.shape = 1 end },
  -- tensors: functions
  { "fh.add", "TypeError", fh.add, t, "x" },
  { "fh.sum", "TypeError", fh.sum, 1 },
  { "fh.equal", "TypeError", fh.equal, t },
  { "fh.allclose", "TypeError", fh.allclose, t, t, { rtol = "x" } },
  { "fh.max_abs_diff", "ValueError", fh.max_abs_diff, t, fh.zeros({ 5 }, { dtype = "float64" }) },
  { "fh.rns.add", "TypeError", fh.rns.add, t, t, {} },
  { "fh.rns.mul", "ValueError", fh.rns.mul, u:view({ 1, 2 }), u:view({ 1, 2 }), { 2 ^ 62 } },
  -- cuda (checked before any device is needed)
  { "fh.cuda.Event", "TypeError", fh.cuda.Event, { timing = 1 } },
  { "fh.cuda.Stream", "ValueError", fh.cuda.Stream, { bogus = 1 } },
  { "fh.cuda.with_stream", "TypeError", fh.cuda.with_stream, 1, f },
  { "fh.cuda.set_stream", "TypeError", fh.cuda.set_stream, 1 },
  { "fh.cuda.memory_stats", "ValueError", fh.cuda.memory_stats, "x" },
  { "fh.cuda.synchronize", "ValueError", fh.cuda.synchronize, 1.5 },
  -- CKKS engine
  { "fh.CkksEngine", "ValueError", fh.CkksEngine, "nope" },
  { "fh.CkksEngine", "TypeError", fh.CkksEngine, 5 },
  { "fh.CkksEngine", "ValueError", fh.CkksEngine, { log_n = 10, q_bits = { 40 }, p_bits = { 60 }, bogus = 1 } },
  { "CkksEngine:add", "StateError", e.add, e, ct, ct_ntt },
  { "CkksEngine:add", "TypeError", e.add, e, ct, 1 },
  { "CkksEngine:add", "TypeError", e.add, t, ct, ct },
  { "CkksEngine:multiply", "StateError", e.multiply, e, ct, ct },
  { "CkksEngine:decrypt", "TypeError", e.decrypt, e, ct, pk },
  { "CkksEngine:rotate_by_step", "ValueError", e.rotate_by_step, e, ct, 1.5 },
  { "CkksEngine:create_rotation_key", "ValueError", e.create_rotation_key, e, sk, 0.5 },
  { "CkksEngine:rescale_to_next_level", "StateError", e.rescale_to_next_level, e,
    e:rescale_to_next_level(ct_ntt) },
  { "CkksEngine:encode", "TypeError", e.encode, e, "x" },
  { "CkksEngine:encode", "StateError", e.encode, e, { 1 }, { level = 9 } },
  { "CkksEngine:encode", "ValueError", e.encode, e, { 1 }, { lvl = 1 } },
  { "CkksEngine:encrypt_message", "ValueError", e.encrypt_message, e, {}, pk },
  { "CkksEngine:encrypt_message", "StateError", e.encrypt_message, e, { 1 }, pk, { level = 9 } },
  { "CkksEngine:encrypt_message", "TypeError", e.encrypt_message, e, { 1 }, sk },
  { "CkksEngine:decrypt_message", "TypeError", e.decrypt_message, e, ct, pk },
  { "CkksEngine:decode", "TypeError", e.decode, e, 1 },
  { "CkksEngine:decrypt_message", "TypeError", e.decrypt_message, e, ct, sk, { is_real = 1 } },
  { "CkksEngine:stack_batch", "ValueError", e.stack_batch, e, {} },
  -- values and contexts
  { "fh.Plaintext", "ValueError", fh.Plaintext, {} },
  { "fh.Ciphertext", "ValueError", fh.Ciphertext, { data = t } },
  { "fh.Ciphertext", "TypeError", fh.Ciphertext, 5 },
  { "fh.CkksContext", "ValueError", fh.CkksContext, {} },
  { "fh.CkksContext", "ValueError", fh.CkksContext, { ring_degree = 16, default_scale = 1, q_primes = { 97, 2 ^ 60 },
    p_primes = { 193 } } },
  { "Ciphertext:to", "ValueError", ct.to, ct, "gpu" },
  { "Ciphertext:to", "TypeError", ct.to, ct, 0 },
  { "Ciphertext:clone", "TypeError", ct.clone, t },
  { "Plaintext:metadata", "TypeError", pt.metadata, {} },
  { "Ciphertext.__newindex", "TypeError", function() ct.level = 3 end },
  { "CkksContext:prime", "ValueError", ctx.prime, ctx, 99 },
  { "fh.context_lookup", "TypeError", fh.context_lookup, 1 },
  { "fh.envelope", "TypeError", fh.envelope, 1 },
  { "fh.from_envelope", "TypeError", fh.from_envelope, 1 },
  { "fh.serialize", "TypeError", fh.serialize, 1 },
  { "fh.deserialize", "TypeError", fh.deserialize, 5 },
  { "fh.save", "TypeError", fh.save, t, nil },
  { "fh.is_prime", "TypeError", fh.is_prime, "x" },
  { "fh.value_equal", "TypeError", fh.value_equal, t, ct },
  { "fh.ckks_security_budget_bits", "ValueError", fh.ckks_security_budget_bits, 1.5 },
  -- execution: buffers, handles, programs, partial
  { "ex.ReusableValueBuffer.like", "TypeError", ex.ReusableValueBuffer.like, { 1 } },
  { "ex.ReusableValueBuffer.like", "ValueError", ex.ReusableValueBuffer.like, { t }, { bogus = 1 } },
  { "ReusableValueBuffer:copy_from", "TypeError", buf.copy_from, buf, { 1 } },
  { "ReusableValueBuffer:copy_from", "ExecutionInputError", buf.copy_from, buf, { fh.zeros({ 3 }) } },
  { "ReusableValueBuffer:copy_from", "TypeError", buf.copy_from, hp, { t } },
  { "CopyHandle:wait_on", "TypeError", handle.wait_on, handle, 1 },
  { "ex.pin_value_tree", "TypeError", ex.pin_value_tree, 1 },
  { "ex.value_tree_nbytes", "TypeError", ex.value_tree_nbytes, f },
  { "ex.CudaGraphProgram.capture", "TypeError", ex.CudaGraphProgram.capture, 1 },
  { "ex.HostGraphProgram.capture", "ValueError", ex.HostGraphProgram.capture, f, {} },
  { "ex.HostGraphProgram.capture", "TypeError", ex.HostGraphProgram.capture, f, { example_inputs = { 1 } } },
  { "ex.HostGraphProgram.capture", "CudaGraphCaptureError", ex.HostGraphProgram.capture, function() error("boom") end,
    { example_inputs = { t } } },
  { "HostGraphProgram:replay", "TypeError", hp.replay, hp, { 1 } },
  { "HostGraphProgram:replay", "CudaGraphInputError", hp.replay, hp, { fh.zeros({ 4 }, { dtype = "float64" }) } },
  { "HostGraphProgram:replay", "TypeError", hp.replay, buf, { t } },
  { "HostGraphProgram:replay", "ExecutionError", closed.replay, closed, { t } },
  { "HostGraphProgram:replay", "ValueError", hp.replay, hp, { t }, { bogus = 1 } },
  { "HostGraphProgram:close", "TypeError", hp.close, t },
  { "HostGraphProgram:replay_prepared", "TypeError", hp.replay_prepared, hp, { copy_handle = 1 } },
  { "HostGraphProgram:copy_inputs_from", "TypeError", hp.copy_inputs_from, hp, { 1 } },
  { "fh.partial", "TypeError", fh.partial, 1 },
  -- signatures and trees
  { "ex.TensorSignature.from_tensor", "TypeError", ex.TensorSignature.from_tensor, 1 },
  { "ex.ValueSignature.from_value", "TypeError", ex.ValueSignature.from_value, t },
  { "ex.ValueTreeSignature.from_value", "TypeError", ex.ValueTreeSignature.from_value, { f = f } },
  { "ex.ValueTreeSignature.from_value", "TypeError", ex.ValueTreeSignature.from_value, { 1, a = t } },
  { "ValueTreeSignature:validate", "TypeError", tree_sig.validate, tree_sig, 1 },
  { "ValueTreeSignature:validate", "ExecutionInputError", tree_sig.validate, tree_sig, { fh.zeros({ 3 }) } },
  { "ValueTreeSignature:validate", "ValueError", tree_sig.validate, tree_sig, { t }, { bogus = 1 } },
  { "TensorSignature:validate", "ExecutionInputError", tsig.validate, tsig, fh.zeros({ 3 }) },
  { "ex.tuple", "ValueError", ex.tuple, 1, nil, 2 },
  -- the REPL's and the errors module's own entry points
  { "fh.errors.new", "ValueError", fh.errors.new, "NoSuchKind", "x" },
  { "fh.errors.raise", "TypeError", fh.errors.raise, "ValueError", 5 },
  { "Generator:seed", "TypeError", gen.seed, 1 },
}

if not H.has_gpu then
  -- without a GPU every device call is a CudaError naming the call
  for _, c in ipairs {
    { "fh.cuda.synchronize", fh.cuda.synchronize },
    { "fh.cuda.Stream", fh.cuda.Stream },
    { "fh.cuda.current_stream", fh.cuda.current_stream },
    { "fh.cuda.get_device_properties", fh.cuda.get_device_properties, 0 },
    { "fh.cuda.set_device", fh.cuda.set_device, 0 },
    { "Tensor:cuda", t.cuda, t },
    { "Tensor:to", t.to, t, "cuda" },
    { "fh.zeros", fh.zeros, { 2 }, { device = "cuda" } },
  } do
    cases[#cases + 1] = { c[1], "CudaError", unpack(c, 2) }
  end
end

local function escape(s) return (s:gsub("%p", "%%%0")) end

describe("error messages", function()
  it("cover at least 60 bad calls", function()
    assert.is_true(#cases >= 60, #cases)
  end)

  for i, c in ipairs(cases) do
    local name, kind, fn = c[1], c[2], c[3]
    it(("#%d %s raises %s named %s"):format(i, name, kind, name), function()
      local err = H.expect_error(kind, "^" .. escape(name) .. ": ", fn, unpack(c, 4, table.maxn(c)))
      local rest = err.message:sub(#name + 3)
      assert.is_true(#rest > 0, err.message)
      -- not doubled: the rest does not begin with the name or its method again
      local short = name:match("[:.]([%w_]+)$") or name
      assert.is_nil(rest:find("^" .. escape(name) .. ": "), err.message)
      assert.is_nil(rest:find("^[%w_.:]*" .. escape(short) .. ": "), err.message)
    end)
  end
end)
