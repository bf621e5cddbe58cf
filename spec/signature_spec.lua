-- Execution signatures: tensors, values, trees; validation naming the path
-- and field of the first mismatch.
local fh = require "fhelium"
local ex = require "fhelium.execution"
local H = require "spec.helpers"
local T = require "spec.fixtures.small_context"

local ctx = T.context()
local N = ctx.ring_degree
local function u64(shape) return fh.zeros(shape, { dtype = "uint64" }) end

local function ct(f)
  f = f or {}
  f.data = f.data or u64 { 2, 3, N }
  if f.context == nil then f.context = ctx end
  return fh.Ciphertext(f)
end

-- validate and expect an ExecutionInputError whose message matches every pattern
local function mismatch(sig, tree, patterns, opts)
  local err = H.expect_error("ExecutionInputError", patterns, sig.validate, sig, tree, opts)
  assert.is_string(err.path)
  return err
end

describe("signatures", function()
  it("are reachable as fh.execution and require 'fhelium.execution'", function()
    assert.equal(ex, fh.execution)
    assert.is_function(ex.TensorSignature.from_tensor)
    assert.is_function(ex.ValueSignature.from_value)
    assert.is_function(ex.ValueTreeSignature.from_value)
  end)

  describe("TensorSignature", function()
    it("records shape, stride, dtype, layout and requires_grad", function()
      local t = fh.zeros({ 2, 3 }, { dtype = "float64", requires_grad = true })
      local s = ex.TensorSignature.from_tensor(t)
      assert.equal("TensorSignature", s.class)
      assert.same({ 2, 3 }, s.shape)
      assert.same({ 3, 1 }, s.stride)
      assert.equal("float64", s.dtype)
      assert.equal("strided", s.layout)
      assert.is_true(s.requires_grad)
      assert.is_nil(s.device)
      assert.equal("tensor(float64,shape={2,3},stride={3,1},strided,requires_grad=true)", s:key())
      assert.equal("TensorSignature(" .. s:key() .. ")", tostring(s))
      assert.is_true(s:validate(fh.ones({ 2, 3 }, { dtype = "float64", requires_grad = true })))
    end)

    it("tells a transposed view from a contiguous tensor by its stride", function()
      local a = fh.zeros({ 3, 2 })
      local b = fh.zeros({ 2, 3 }):transpose(1, 2)
      local sa, sb = ex.TensorSignature.from_tensor(a), ex.TensorSignature.from_tensor(b)
      assert.same(sa.shape, sb.shape)
      assert.is_false(sa == sb)
      assert.are_not.equal(sa:key(), sb:key())
      mismatch(sa, b, "value: tensor stride mismatch: expected {2,1}, got {1,3}")
    end)

    it("names shape, dtype and requires_grad mismatches", function()
      local s = ex.TensorSignature.from_tensor(fh.zeros({ 2, 3 }))
      mismatch(s, fh.zeros({ 3, 2 }), "value: tensor shape mismatch: expected {2,3}, got {3,2}")
      mismatch(s, fh.zeros({ 6 }), "shape mismatch: expected {2,3}, got {6}")
      mismatch(s, fh.zeros({ 2, 3 }, { dtype = "float64" }), "dtype mismatch: expected float32, got float64")
      mismatch(s, fh.zeros({ 2, 3 }, { requires_grad = true }), "requires_grad mismatch: expected false, got true")
      mismatch(s, { fh.zeros({ 2, 3 }) }, "kind mismatch: expected a tensor, got a list of length 1")
      local err = mismatch(s, fh.zeros({ 3 }), "^TensorSignature:validate: input: ", { path = "input" })
      assert.equal("input", err.path)
    end)

    it("are equal for equal topology on any device", function()
      local a = ex.TensorSignature.from_tensor(fh.zeros({ 4 }, { dtype = "int64" }))
      local b = ex.TensorSignature.from_tensor(fh.ones({ 4 }, { dtype = "int64" }))
      assert.is_true(a == b)
      assert.equal(a:key(), b:key())
      H.expect_error("TypeError", "argument 1 %(t%) expected a Tensor, got number", ex.TensorSignature.from_tensor, 1)
    end)

    H.gpu_it("ignore the device: a CUDA tensor validates against a CPU signature", function()
      local cpu = fh.randn({ 2, 5 })
      local s = ex.TensorSignature.from_tensor(cpu)
      assert.is_true(s:validate(cpu:to("cuda")))
      assert.is_true(ex.TensorSignature.from_tensor(cpu:to("cuda")) == s)
    end)
  end)

  it("name the call and the argument in their errors", function()
    local sig = ex.ValueTreeSignature.from_value({ fh.ones(2) })
    H.expect_error("TypeError", "ValueTreeSignature:validate: option 'path' expected a string, got number", sig.validate,
      sig, { fh.ones(2) }, { path = 5 })
    H.expect_error("TypeError", "ValueTreeSignature:validate: expected a signature, got number", sig.validate, 5,
      { fh.ones(2) })
    H.expect_error("TypeError", "ex.ValueSignature.from_value: expected a CKKS value, got Tensor",
      ex.ValueSignature.from_value, fh.ones(2))
  end)

  describe("ValueSignature", function()
    it("records type, schema version, context id, sorted metadata and tensor signatures", function()
      local v = ct { level = 1, data = u64 { 2, 2, N }, polynomial_domain = "ntt" }
      local s = ex.ValueSignature.from_value(v)
      assert.equal("ValueSignature", s.class)
      assert.equal("Ciphertext", s.type_name)
      assert.equal(1, s.schema_version)
      assert.equal(ctx.id, s.context_id)
      assert.same({ "level", "modulus_basis", "num_components", "polynomial_domain", "prime_ids",
        "residue_representation", "scale" }, s.metadata_keys)
      assert.same(v:metadata(), s.metadata)
      assert.equal(1, #s.tensors)
      assert.equal("data", s.tensors[1].name)
      assert.equal("TensorSignature", s.tensors[1].signature.class)
      assert.same({ 2, 2, N }, s.tensors[1].signature.shape)
      assert.is_true(s.tensors[1].signature == ex.TensorSignature.from_tensor(v.data))
      assert.is_true(s.tensors[1].signature:validate(u64 { 2, 2, N }))
      mismatch(s.tensors[1].signature, u64 { 2, 3, N }, "shape mismatch")
      mismatch(s.tensors[1].signature, { u64 { 2, 2, N } }, "value: kind mismatch: expected a tensor, got a list of length 1")
      H.expect_error("TypeError", "unsupported leaf: a number", s.tensors[1].signature.validate, s.tensors[1].signature, 3)
      assert.equal(ex.TensorSignature.from_tensor(v.data):key(), s.tensors[1].signature:key())
      H.expect_error("TypeError", "not a tree signature", s.tensors[1].signature.flatten, s.tensors[1].signature, v.data)
      assert.matches("^value%(Ciphertext,schema=1,context=" .. ctx.id .. ",level=1,modulus_basis=Q,num_components=2," ..
        "polynomial_domain=ntt,prime_ids={1,2},residue_representation=montgomery,scale=1048576,tensors={data:tensor%(uint64",
        s:key())
      assert.is_true(s:validate(ct { level = 1, data = u64 { 2, 2, N }, polynomial_domain = "ntt" }))
      H.expect_error("TypeError", "expected a CKKS value, got Tensor", ex.ValueSignature.from_value, u64 { 2 })
    end)

    it("bind every state axis: changing each one fails validation naming it", function()
      local base = ct { data = u64 { 2, 2, N }, level = 1 }
      local s = ex.ValueSignature.from_value(base)
      assert.is_true(s:validate(ct { data = u64 { 2, 2, N }, level = 1 }))
      local cases = {
        { ct { data = u64 { 2, 3, N }, level = 0 }, "Ciphertext level mismatch: expected 1, got 0" },
        { ct { data = u64 { 2, 2, N }, level = 1, scale = 2 ^ 20 + 1 }, "Ciphertext scale mismatch: expected 1048576, got 1048577" },
        { ct { data = u64 { 2, 3, N }, level = 1, modulus_basis = "QP" }, "Ciphertext modulus_basis mismatch: expected Q, got QP" },
        { ct { data = u64 { 2, 2, N }, level = 1, polynomial_domain = "ntt" },
          "Ciphertext polynomial_domain mismatch: expected coefficient, got ntt" },
        { ct { data = u64 { 3, 2, N }, level = 1 }, "Ciphertext num_components mismatch: expected 2, got 3" },
        { ct { data = u64 { 2, 2, N }, level = 1, context = T.context { skip = 3 } }, "Ciphertext context_id mismatch: expected " .. ctx.id },
        { fh.Plaintext { data = u64 { 2, N }, context = ctx, level = 1 }, "type mismatch: expected Ciphertext, got Plaintext" },
        { ct { data = u64 { 2, 5, 2, N }, level = 1 }, "Ciphertext tensor 'data' shape mismatch: expected {2,2,16}, got {2,5,2,16}" },
        { ct { data = u64 { 2, N, 2 }:transpose(2, 3), level = 1 }, "Ciphertext tensor 'data' stride mismatch" },
        { ct { data = u64 { 2, 2, N }:requires_grad_(true), level = 1 }, "Ciphertext tensor 'data' requires_grad mismatch" },
      }
      for i, c in ipairs(cases) do
        local err = mismatch(s, c[1], c[2])
        assert.equal("value", err.path, "case " .. i)
      end
      -- prime_ids are determined by level and basis; any difference is caught
      local qp = ex.ValueSignature.from_value(ct { data = u64 { 2, 3, N }, level = 1, modulus_basis = "QP" })
      assert.are_not.equal(qp:key(), s:key())
    end)

    it("bind the residue representation, representation, rotation step and message dtype", function()
      local pt = fh.Plaintext { data = u64 { 3, N }, context = ctx }
      mismatch(ex.ValueSignature.from_value(pt), fh.Plaintext { data = u64 { 3, N }, context = ctx, residue_representation = "montgomery" },
        "Plaintext residue_representation mismatch: expected standard, got montgomery")
      mismatch(ex.ValueSignature.from_value(pt), fh.Plaintext { message = fh.zeros(3, { dtype = "float64" }), context = ctx },
        "Plaintext representation mismatch: expected rns, got slots")
      local function rk(step) return fh.RotationKey { data = u64 { 1, 2, 4, N }, context = ctx, step = step } end
      mismatch(ex.ValueSignature.from_value(rk(1)), rk(2), "RotationKey step mismatch: expected 1, got 2")
      assert.is_true(ex.ValueSignature.from_value(rk(1)):validate(rk(9))) -- 9 = 1 mod 8 slots
      local m = fh.Plaintext { message = fh.zeros(3, { dtype = "float64" }), scale = 2 }
      mismatch(ex.ValueSignature.from_value(m), fh.Plaintext { message = fh.zeros(3, { dtype = "complex128" }), scale = 2 },
        "Plaintext tensor 'message' dtype mismatch: expected float64, got complex128")
      mismatch(ex.ValueSignature.from_value(m), fh.Plaintext { message = fh.zeros(3, { dtype = "float64" }), scale = 2, context = ctx },
        "Plaintext context_id mismatch: expected %(none%), got " .. ctx.id)
      mismatch(ex.ValueSignature.from_value(fh.SecretKey { data = u64 { 4, N }, context = ctx }),
        fh.PublicKey { data = u64 { 2, 4, N }, context = ctx }, "type mismatch: expected SecretKey, got PublicKey")
      mismatch(ex.ValueSignature.from_value(pt), u64 { 3, N }, "kind mismatch: expected a Plaintext value, got a tensor")
    end)

    H.gpu_it("ignore the device: CPU and CUDA values with the same state validate against each other", function()
      local v = ct { data = fh.tensor({ { { 1ULL } } }):expand({ 2, 3, N }):contiguous() }
      local g = v:to("cuda")
      assert.is_true(ex.ValueSignature.from_value(v):validate(g))
      assert.is_true(ex.ValueSignature.from_value(g) == ex.ValueSignature.from_value(v))
      assert.is_true(ex.ValueTreeSignature.from_value({ v }):validate({ g }))
    end)
  end)

  describe("ValueTreeSignature", function()
    it("describes kinds, children, sorted keys and leaves", function()
      local v = ct()
      local tree = { values = { v, fh.ones(2) }, w = fh.zeros({ 3 }), pair = ex.tuple(fh.ones(1), v) }
      local s = ex.ValueTreeSignature.from_value(tree)
      assert.equal("ValueTreeSignature", s.class)
      assert.equal("dict", s.kind)
      assert.same({ "pair", "values", "w" }, s.keys)
      assert.equal(3, #s.children)
      assert.equal("tuple", s.children[1].kind)
      assert.equal("list", s.children[2].kind)
      assert.equal("tensor", s.children[3].kind)
      assert.equal("TensorSignature", s.children[3].leaf.class)
      assert.is_nil(s.leaf)
      assert.is_nil(s.children[3].children)
      local vs = s.children[2].children[1]
      assert.equal("value", vs.kind)
      assert.equal("ValueSignature", vs.leaf.class)
      assert.is_true(vs.leaf == ex.ValueSignature.from_value(v))
      assert.equal(5, s.nleaves)
      assert.equal(3, s.depth)
      assert.is_true(s:validate(tree))
      assert.matches("^ValueTreeSignature%(dict{\"pair\":tuple%(tensor", tostring(s))
    end)

    it("does not depend on dict insertion order", function()
      local a, b = {}, {}
      local names = {}
      for i = 1, 40 do names[i] = "k" .. i end
      for i = 1, 40 do a[names[i]] = fh.zeros({ i }) end
      for i = 40, 1, -1 do b[names[i]] = fh.zeros({ i }) end
      local sa, sb = ex.ValueTreeSignature.from_value(a), ex.ValueTreeSignature.from_value(b)
      assert.is_true(sa == sb)
      assert.equal(sa:key(), sb:key())
      assert.is_true(sa:validate(b))
      local cache = { [sa:key()] = "hit" }
      assert.equal("hit", cache[sb:key()])
    end)

    it("tells lists, tuples and dicts apart", function()
      local l = ex.ValueTreeSignature.from_value({ fh.ones(1) })
      local t = ex.ValueTreeSignature.from_value(ex.tuple(fh.ones(1)))
      local d = ex.ValueTreeSignature.from_value({ a = fh.ones(1) })
      assert.is_false(l == t)
      assert.is_false(l == d)
      mismatch(l, ex.tuple(fh.ones(1)), "kind mismatch: expected a list of length 1, got a tuple of length 1")
      mismatch(t, { fh.ones(1) }, "kind mismatch: expected a tuple of length 1, got a list of length 1")
      mismatch(d, { fh.ones(1) }, "kind mismatch: expected a dict of 1 keys, got a list of length 1")
      local e = ex.ValueTreeSignature.from_value({})
      assert.equal("list", e.kind)
      assert.is_true(e:validate({}))
      mismatch(e, { fh.ones(1) }, "length mismatch: expected a list of length 0, got length 1")
    end)

    it("reports the first mismatch with its path and expected vs actual", function()
      local v0, v1 = ct(), ct { level = 1, data = u64 { 2, 2, N } }
      local s = ex.ValueTreeSignature.from_value({ values = { v0, v1 }, w = fh.zeros({ 2 }) })
      local err = mismatch(s, { values = { v1, v0 }, w = fh.zeros({ 2 }) },
        "^ValueTreeSignature:validate: value%[\"values\"%]%[1%]: Ciphertext level mismatch: expected 0, got 1$")
      assert.equal('value["values"][1]', err.path)
      mismatch(s, { values = { v0, v1, v1 }, w = fh.zeros({ 2 }) },
        "^ValueTreeSignature:validate: value%[\"values\"%]: length mismatch: expected a list of length 2, got length 3$")
      mismatch(s, { values = { v0, v1 }, x = fh.zeros({ 2 }) }, "^ValueTreeSignature:validate: value: dict keys mismatch: missing key \"w\"")
      mismatch(s, { values = { v0, v1 }, w = fh.zeros({ 2 }), x = fh.zeros({ 2 }) },
        "^ValueTreeSignature:validate: value: dict keys mismatch: unexpected key \"x\" %(expected 2 keys%)")
      mismatch(s, { values = { v0, fh.zeros(1) }, w = fh.zeros({ 2 }) },
        "^ValueTreeSignature:validate: value%[\"values\"%]%[2%]: kind mismatch: expected a Ciphertext value, got a tensor$")
      mismatch(s, { values = { v0, v1 }, w = fh.zeros({ 3 }) }, "^ValueTreeSignature:validate: value%[\"w\"%]: tensor shape mismatch: expected {2}, got {3}$")
      err = mismatch(s, { values = { v0, v1 }, w = fh.zeros({ 3 }) }, "^ValueTreeSignature:validate: source%[\"w\"%]", { path = "source" })
      assert.equal('source["w"]', err.path)
      -- dict keys are escaped in paths
      local odd = ex.ValueTreeSignature.from_value({ ["a\"b\n"] = fh.ones(1) })
      mismatch(odd, { ["a\"b\n"] = fh.ones(2) }, 'value%["a\\"b\\n"%]: tensor shape mismatch')
      mismatch(odd, { ["ab"] = fh.ones(1) }, 'dict keys mismatch: missing key "a\\"b\\n"')
    end)

    it("flattens leaves in order (dict keys sorted, value tensors in place) and unflattens them", function()
      local v = ct()
      local tree = { b = fh.ones(1), a = { v, ex.tuple(fh.zeros(2)) } }
      local s = ex.ValueTreeSignature.from_value(tree)
      local leaves = s:flatten(tree)
      assert.equal(3, #leaves)
      assert.equal(v.data:data_ptr(), leaves[1]:data_ptr())
      assert.equal(tree.a[2][1]:data_ptr(), leaves[2]:data_ptr())
      assert.equal(tree.b:data_ptr(), leaves[3]:data_ptr())
      local copies = {}
      for i, t in ipairs(leaves) do copies[i] = t:clone() end
      local rebuilt = s:unflatten(copies)
      assert.is_true(s:validate(rebuilt))
      assert.is_true(ex.is_tuple(rebuilt.a[2]))
      assert.equal(copies[1]:data_ptr(), rebuilt.a[1].data:data_ptr())
      assert.is_true(rebuilt.a[1]:equal(v))
      H.expect_error("ValueError", "expected 3 tensors, got 2", s.unflatten, s, { copies[1], copies[2] })
      H.expect_error("ValueError", "Ciphertext tensor 1: shape mismatch", s.unflatten, s, { u64 { 2, 2, N }, copies[2], copies[3] })
      H.expect_error("ValueError", "unflatten: value%[\"b\"%]: tensor shape mismatch", s.unflatten, s, { copies[1], copies[2], fh.ones(5) })
      H.expect_error("TypeError", "element 2 expected a Tensor, got number", s.unflatten, s, { copies[1], 2, copies[3] })
      H.expect_error("TypeError", "unflatten: expected a list of tensors, got Tensor", s.unflatten, s, copies[1])
      mismatch(s, { b = fh.ones(1), a = { v } }, "length mismatch")
      H.expect_error("ExecutionInputError", "length mismatch", s.flatten, s, { b = fh.ones(1), a = { v } })
    end)

    it("raise TypeError naming the path for unsupported leaves and ambiguous tables", function()
      local co = coroutine.create(function() end)
      local one = { fh.ones(1) }
      -- { tree, message, a tree of the expected shape to validate against }
      local cases = {
        { { 1 }, "value%[1%]: unsupported leaf: a number", one },
        { { a = "x" }, "value%[\"a\"%]: unsupported leaf: a string", { a = fh.ones(1) } },
        { { true }, "unsupported leaf: a boolean", one },
        { { print }, "unsupported leaf: a function", one },
        { { co }, "unsupported leaf: a coroutine", one },
        { { fh.Generator(1) }, "unsupported leaf: a Generator userdata", one },
        { { ctx }, "unsupported leaf: a CkksContext has no tensors", one },
        { { ex.TensorSignature.from_tensor(fh.ones(1)) }, "unsupported leaf: a TensorSignature userdata", one },
        { { 1ULL }, "unsupported leaf: a cdata", one },
        { { x = { 1, a = fh.ones(1) } }, "value%[\"x\"%]: ambiguous table: it mixes list indices and string keys",
          { x = { fh.ones(1) } } },
        { { [1] = fh.ones(1), [3] = fh.ones(1) }, "value: ambiguous table: its integer keys are not exactly 1..n", one },
        { { [1.5] = fh.ones(1) }, "ambiguous table: key 1.5 is neither a list index", one },
        { { [true] = fh.ones(1) }, "ambiguous table: a key is a boolean", one },
        { 5, "^value: unsupported leaf: a number", one },
        { { fh.ones(1), 3 }, "value%[2%]: unsupported leaf: a number", { fh.ones(1), fh.ones(1) } },
      }
      for _, c in ipairs(cases) do
        local pat = c[2]:gsub("^%^", "")
        local err = H.expect_error("TypeError", "^ex%.ValueTreeSignature%.from_value: .*" .. pat,
          ex.ValueTreeSignature.from_value, c[1])
        assert.is_string(err.path)
        local s = ex.ValueTreeSignature.from_value(c[3])
        err = H.expect_error("TypeError", "^ValueTreeSignature:validate: .*" .. pat, s.validate, s, c[1])
        assert.is_string(err.path)
      end
      H.expect_error("TypeError", "argument 1 %(tree%) is missing", ex.ValueTreeSignature.from_value)
    end)

    it("raise instead of overflowing on deep or cyclic trees", function()
      local deep = {}
      local node = deep
      for _ = 1, 200 do node[1] = {} node = node[1] end
      node[1] = fh.ones(1)
      local err = H.expect_error("ValueError", "tree nesting deeper than 64 levels", ex.ValueTreeSignature.from_value, deep)
      assert.matches("^value%[1%]%[1%]", err.path)
      local ok = {}
      node = ok
      for _ = 1, 63 do node[1] = {} node = node[1] end
      node[1] = fh.ones(1)
      local s = ex.ValueTreeSignature.from_value(ok)
      assert.equal(65, s.depth)
      assert.is_true(s:validate(ok))
      local cyc = { a = { fh.ones(1) } }
      cyc.a[2] = cyc
      H.expect_error("TypeError", "value%[\"a\"%]%[2%]: cyclic tree: this table is also value", ex.ValueTreeSignature.from_value, cyc)
      local self = {}
      self[1] = self
      H.expect_error("TypeError", "cyclic tree", ex.ValueTreeSignature.from_value, self)
      -- validating a cyclic candidate stops at the signature's depth
      local sig = ex.ValueTreeSignature.from_value({ { fh.ones(1) } })
      mismatch(sig, self, "value%[1%]%[1%]: kind mismatch: expected a tensor, got a list of length 1")
      H.expect_error("TypeError", "cyclic tree", fh.serialize, self)
    end)

    it("validate rejects bad options", function()
      local s = ex.ValueTreeSignature.from_value({ fh.ones(1) })
      H.expect_error("ValueError", "unknown option 'root'", s.validate, s, { fh.ones(1) }, { root = "x" })
      H.expect_error("TypeError", "option 'path' expected a string", s.validate, s, { fh.ones(1) }, { path = 1 })
      H.expect_error("TypeError", "expected a signature", s.validate, {}, {})
    end)

    it("validates a small tree in a few microseconds", function()
      local x, w = fh.zeros({ 64 }), ct()
      local tree = { x, w }
      local s = ex.ValueTreeSignature.from_value(tree)
      local n = 20000
      local t0 = os.clock()
      for _ = 1, n do s:validate(tree) end
      local us = (os.clock() - t0) / n * 1e6
      io.stderr:write(("[validate: %.2f us per call for a tensor + a ciphertext]\n"):format(us))
      assert.is_true(us < 50, ("validate took %.1f us per call"):format(us))
    end)
  end)

  describe("ex.tuple", function()
    it("makes fixed-length tuples without nil", function()
      local t = ex.tuple(1, "a")
      assert.is_true(ex.is_tuple(t))
      assert.is_false(ex.is_tuple({ 1 }))
      assert.equal(2, #t)
      assert.equal("tuple(1, a)", tostring(t))
      H.expect_error("TypeError", "tuples are immutable %(cannot set element 3%)", function() t[3] = 1 end)
      H.expect_error("TypeError", "tuples are immutable %(cannot set element x%)", function() t.x = 1 end)
      H.expect_error("ValueError", "ex.tuple: element 2 is nil", ex.tuple, 1, nil, 3)
      assert.equal(0, #ex.tuple())
      H.expect_error("TypeError", "a tuple holds only positional elements", ex.ValueTreeSignature.from_value,
        (function() local tt = ex.tuple(fh.ones(1)) rawset(tt, "x", fh.ones(1)) return tt end)())
    end)
  end)
end)
