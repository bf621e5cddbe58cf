-- CKKS values: direct constructors, exact state, validation, movement,
-- envelopes.
local fh = require "fhelium"
local H = require "spec.helpers"
local T = require "spec.fixtures.small_context"

local ctx = T.context()       -- N = 16, 3 Q primes (max_level 1), 1 P prime
local N = ctx.ring_degree
local function u64(shape) return fh.zeros(shape, { dtype = "uint64" }) end
local function seq(shape, start)
  local n = 1
  for _, s in ipairs(shape) do n = n * s end
  return fh.arange(start or 0, (start or 0) + n, 1, { dtype = "uint64" }):view(shape)
end

describe("values", function()
  describe("Ciphertext", function()
    it("takes defaults for every state axis and reports them", function()
      local ct = fh.Ciphertext { data = u64 { 2, 3, N }, context = ctx }
      assert.equal("Ciphertext", ct.type)
      assert.equal(0, ct.level)
      assert.equal(ctx.default_scale, ct.scale)
      assert.same({ 0, 1, 2 }, ct.prime_ids)
      assert.equal("coefficient", ct.polynomial_domain)
      assert.equal("standard", ct.residue_representation)
      assert.equal("Q", ct.modulus_basis)
      assert.equal(2, ct.num_components)
      assert.equal(ctx.id, ct.context_id)
      assert.is_true(ct.context == ctx)
      assert.equal("cpu", ct.device)
      assert.same({}, ct.batch_shape)
      assert.equal(1, ct.schema_version)
      assert.is_nil(ct.representation)
      assert.is_nil(ct.step)
      assert.is_false(ct.is_secret)
      assert.is_true(fh.is_value(ct))
      assert.is_false(fh.is_value(ct.data))
    end)

    it("records explicit state: level, scale, NTT/Montgomery, QP, three components, batch axes", function()
      local ct = fh.Ciphertext { data = u64 { 3, 4, 5, 3, N }, context_id = ctx.id, level = 1, scale = 12345.5,
        polynomial_domain = "ntt", residue_representation = "montgomery", modulus_basis = "QP",
        prime_ids = { 1, 2, 3 }, num_components = 3 }
      assert.equal(1, ct.level)
      assert.equal(12345.5, ct.scale)
      assert.same({ 1, 2, 3 }, ct.prime_ids)
      assert.equal("ntt", ct.polynomial_domain)
      assert.equal("montgomery", ct.residue_representation)
      assert.equal("QP", ct.modulus_basis)
      assert.equal(3, ct.num_components)
      assert.same({ 4, 5 }, ct.batch_shape)
      assert.same({
        level = 1, scale = 12345.5, prime_ids = { 1, 2, 3 }, polynomial_domain = "ntt",
        residue_representation = "montgomery", modulus_basis = "QP", num_components = 3,
      }, ct:metadata())
    end)

    it("couples the residue representation to the domain by default", function()
      local ct = fh.Ciphertext { data = u64 { 2, 3, N }, context = ctx, polynomial_domain = "ntt" }
      assert.equal("montgomery", ct.residue_representation)
    end)

    it("shows every state axis in tostring", function()
      local s = tostring(fh.Ciphertext { data = u64 { 2, 2, N }, context = ctx, level = 1, polynomial_domain = "ntt" })
      for _, part in ipairs { "fhelium.Ciphertext%(", "level=1", "modulus_basis=Q", "num_components=2",
        "polynomial_domain=ntt", "prime_ids={1,2}", "residue_representation=montgomery", "scale=1048576",
        "data={2,2,16} uint64", "context=" .. ctx.id:sub(1, 16), "device=cpu" } do
        assert.matches(part, s)
      end
    end)

    it("keeps a strided view as its data", function()
      local base = u64 { 3, N, 2 }
      local view = base:transpose(2, 3):transpose(1, 2) -- [2, 3, N], non-contiguous
      local ct = fh.Ciphertext { data = view, context = ctx }
      assert.same(view:stride(), ct.data:stride())
      assert.equal(view:data_ptr(), ct.data:data_ptr())
    end)

    it("rejects impossible states naming the field", function()
      local function ct(f)
        f.data = f.data or u64 { 2, 3, N }
        if f.context == nil and f.context_id == nil then f.context = ctx end
        return fh.Ciphertext(f)
      end
      H.expect_error("StateError", "polynomial_domain \"ntt\" requires residue_representation \"montgomery\"", ct,
        { polynomial_domain = "ntt", residue_representation = "standard" })
      H.expect_error("StateError", "polynomial_domain \"coefficient\" requires residue_representation \"standard\"", ct,
        { residue_representation = "montgomery" })
      H.expect_error("StateError", "level 2 is outside %[0, 1%]", ct, { level = 2, data = u64 { 2, 1, N } })
      H.expect_error("ValueError", "level must be >= 0", ct, { level = -1 })
      H.expect_error("ValueError", "'level' must be an integer", ct, { level = 0.5 })
      H.expect_error("ValueError", "'level' must be an integer", ct, { level = "0" })
      for _, s in ipairs { 0, -2, math.huge, 0 / 0 } do
        H.expect_error("ValueError", "scale must be positive and finite", ct, { scale = s })
      end
      H.expect_error("StateError", "data has 2 limb rows but prime_ids lists 3 primes", ct, { data = u64 { 2, 2, N } })
      H.expect_error("StateError", "prime_ids {0,2,1} are not the active rows of level 0 with modulus_basis Q %(expected {0,1,2}%)",
        ct, { prime_ids = { 0, 2, 1 } })
      H.expect_error("StateError", "prime_ids {1,2} are not the active rows of level 0", ct,
        { prime_ids = { 1, 2 }, data = u64 { 2, 2, N } })
      H.expect_error("StateError", "are not the active rows of level 0 with modulus_basis QP", ct,
        { modulus_basis = "QP", prime_ids = { 0, 1, 2 } })
      H.expect_error("StateError", "data has 8 coefficients per row but the context's ring_degree is 16", ct,
        { data = u64 { 2, 3, 8 } })
      H.expect_error("StateError", "num_components must be 2 or 3, data has 4 components", ct, { data = u64 { 4, 3, N } })
      H.expect_error("StateError", "num_components 3 does not match the data's 2 components", ct, { num_components = 3 })
      H.expect_error("ValueError", "data must be a uint64 tensor, got int64", ct,
        { data = fh.zeros({ 2, 3, N }, { dtype = "int64" }) })
      H.expect_error("ValueError", "layout %[component, %*batch, limb, N%], got shape {3,16}", ct, { data = u64 { 3, N } })
      H.expect_error("ValueError", "batch extent 1 of data is 0", ct, { data = u64 { 2, 0, 3, N } })
      H.expect_error("ValueError", "polynomial_domain must be one of \"coefficient\", \"ntt\", got \"eval\"", ct,
        { polynomial_domain = "eval" })
      H.expect_error("ValueError", "residue_representation must be one of", ct, { residue_representation = "mont" })
      H.expect_error("ValueError", "modulus_basis must be one of \"Q\", \"QP\", got \"P\"", ct, { modulus_basis = "P" })
      H.expect_error("ValueError", "unknown metadata field 'lvl'", ct, { lvl = 1 })
      H.expect_error("ValueError", "Ciphertext has no metadata field 'representation'", ct, { representation = "rns" })
      H.expect_error("ValueError", "Ciphertext has no metadata field 'step'", ct, { step = 1 })
      H.expect_error("ValueError", "only a Plaintext has a message", ct, { message = fh.zeros(3) })
    end)

    it("needs a known context", function()
      H.expect_error("ValueError", "a CKKS context is required", fh.Ciphertext, { data = u64 { 2, 3, N } })
      H.expect_error("ValueError", "unknown context_id 'abc'", fh.Ciphertext, { data = u64 { 2, 3, N }, context_id = "abc" })
      local other = T.context { skip = 1 }
      H.expect_error("ValueError", "context and context_id disagree", fh.Ciphertext,
        { data = u64 { 2, 3, N }, context = ctx, context_id = other.id })
      H.expect_error("TypeError", "context expected a CkksContext, got string", fh.Ciphertext,
        { data = u64 { 2, 3, N }, context = ctx.id })
      H.expect_error("TypeError", "context_id expected a string", fh.Ciphertext, { data = u64 { 2, 3, N }, context_id = 5 })
    end)

    it("rejects non-tensor data and non-table arguments", function()
      H.expect_error("TypeError", "data expected a Tensor, got number", fh.Ciphertext, { data = 5, context = ctx })
      H.expect_error("ValueError", "data is required", fh.Ciphertext, { context = ctx })
      H.expect_error("TypeError", "fh.Ciphertext: expected a table of fields, got string", fh.Ciphertext, "x")
      H.expect_error("TypeError", "field 'prime_ids' has unsupported type Tensor", fh.Ciphertext,
        { data = u64 { 2, 3, N }, context = ctx, prime_ids = fh.zeros(3) })
      H.expect_error("ValueError", "prime_ids%[1%] must be an integer, got 0.5", fh.Ciphertext,
        { data = u64 { 2, 3, N }, context = ctx, prime_ids = { 0.5 } })
      H.expect_error("TypeError", "field 'level' has unsupported type boolean", fh.Ciphertext,
        { data = u64 { 2, 3, N }, context = ctx, level = true })
    end)

    it("is immutable", function()
      local ct = fh.Ciphertext { data = u64 { 2, 3, N }, context = ctx }
      H.expect_error("TypeError", "^Ciphertext.__newindex: Ciphertext values are immutable: cannot assign field 'level'", function() ct.level = 1 end)
    end)
  end)

  describe("Plaintext", function()
    it("holds a slots message with or without a context", function()
      local pt = fh.Plaintext { message = fh.tensor({ 1, 2, 3 }, { dtype = "float64" }), level = 0, scale = 16.0 }
      assert.equal("slots", pt.representation)
      assert.equal(16, pt.scale)
      assert.equal(0, pt.level)
      assert.equal("", pt.context_id)
      assert.is_nil(pt.context)
      assert.is_nil(pt.polynomial_domain)
      assert.is_nil(pt.prime_ids)
      assert.is_nil(pt.data)
      assert.same({ 1, 2, 3 }, pt.message:tolist())
      assert.same({}, pt.batch_shape)
      local c = fh.Plaintext { message = fh.zeros({ 2, 3, 8 }, { dtype = "complex128" }), context = ctx }
      assert.same({ 2, 3 }, c.batch_shape)
      assert.equal(ctx.default_scale, c.scale)
      assert.same({ level = 0, representation = "slots", scale = 2 ^ 20 }, c:metadata())
    end)

    it("accepts a scalar message (a number or a 0-dim tensor)", function()
      local a = fh.Plaintext { message = 2.5, scale = 4 }
      assert.same({}, a.message.shape)
      assert.equal("float64", a.message.dtype)
      assert.equal(2.5, a.message:item())
      local b = fh.Plaintext { message = fh.full({}, 1, { dtype = "complex128" }), scale = 4 }
      assert.same({}, b.message.shape)
    end)

    it("holds RNS data in each allowed (domain, residue) state", function()
      for _, st in ipairs { { "coefficient", "standard" }, { "coefficient", "montgomery" }, { "ntt", "montgomery" } } do
        local pt = fh.Plaintext { data = u64 { 5, 2, N }, context = ctx, level = 1, polynomial_domain = st[1],
          residue_representation = st[2] }
        assert.equal("rns", pt.representation)
        assert.equal(st[1], pt.polynomial_domain)
        assert.equal(st[2], pt.residue_representation)
        assert.same({ 1, 2 }, pt.prime_ids)
        assert.same({ 5 }, pt.batch_shape)
      end
    end)

    it("rejects impossible plaintext states naming the field", function()
      H.expect_error("ValueError", "give exactly one of message %(slots%) or data %(rns%)", fh.Plaintext, { scale = 1 })
      H.expect_error("ValueError", "give exactly one of message", fh.Plaintext,
        { message = fh.zeros(3, { dtype = "float64" }), data = u64 { 3, N }, context = ctx })
      H.expect_error("ValueError", "message must be a float64 or complex128 tensor, got float32", fh.Plaintext,
        { message = fh.zeros(3), scale = 1 })
      H.expect_error("StateError", "message has 9 slots but the context has 8", fh.Plaintext,
        { message = fh.zeros(9, { dtype = "float64" }), context = ctx })
      H.expect_error("ValueError", "message extents must be >= 1", fh.Plaintext,
        { message = fh.zeros({ 0, 2 }, { dtype = "float64" }), scale = 1 })
      H.expect_error("ValueError", "scale is required without a context", fh.Plaintext,
        { message = fh.zeros(2, { dtype = "float64" }) })
      H.expect_error("ValueError", "Plaintext %(slots%) has no metadata field 'polynomial_domain'", fh.Plaintext,
        { message = fh.zeros(2, { dtype = "float64" }), scale = 1, polynomial_domain = "ntt" })
      H.expect_error("StateError", "polynomial_domain \"ntt\" requires residue_representation \"montgomery\"", fh.Plaintext,
        { data = u64 { 3, N }, context = ctx, polynomial_domain = "ntt", residue_representation = "standard" })
      H.expect_error("ValueError", "layout %[%*batch, limb, N%]", fh.Plaintext, { data = u64 { N }, context = ctx })
      H.expect_error("ValueError", "a CKKS context is required", fh.Plaintext, { data = u64 { 3, N } })
      H.expect_error("ValueError",
        "representation must be one of \"slots\", \"rns\", \"integer_coefficients\", \"approximate_coefficients\", got \"coeffs\"",
        fh.Plaintext,
        { data = u64 { 3, N }, context = ctx, representation = "coeffs" })
      H.expect_error("StateError", "level 2 is outside", fh.Plaintext,
        { message = fh.zeros(2, { dtype = "float64" }), context = ctx, level = 2 })
      H.expect_error("TypeError", "message expected a Tensor or a number, got string", fh.Plaintext, { message = "1" })
    end)
  end)

  describe("keys", function()
    it("carry prime rows, domain, residues and basis (QP by default), no level or scale", function()
      local sk = fh.SecretKey { data = u64 { 4, N }, context = ctx }
      assert.equal("QP", sk.modulus_basis)
      assert.same({ 0, 1, 2, 3 }, sk.prime_ids)
      assert.is_nil(sk.level)
      assert.is_nil(sk.scale)
      assert.is_true(sk.is_secret)
      local pk = fh.PublicKey { data = u64 { 2, 4, N }, context = ctx, polynomial_domain = "ntt" }
      assert.equal(2, pk.num_components)
      assert.equal("montgomery", pk.residue_representation)
      for _, kind in ipairs { "KeySwitchKey", "RelinearizationKey", "ConjugationKey" } do
        local k = fh[kind] { data = u64 { 3, 2, 4, N }, context = ctx, polynomial_domain = "ntt" }
        assert.equal(kind, k.type)
        assert.equal(3, k.num_digits)
        assert.same({ modulus_basis = "QP", polynomial_domain = "ntt", prime_ids = { 0, 1, 2, 3 },
          residue_representation = "montgomery" }, k:metadata())
      end
      local q = fh.SecretKey { data = u64 { 2, N }, context = ctx, modulus_basis = "Q", prime_ids = { 1, 2 } }
      assert.same({ 1, 2 }, q.prime_ids)
    end)

    it("normalizes a rotation step into (-num_slots/2, num_slots/2]", function()
      local function rk(step)
        return fh.RotationKey { data = u64 { 1, 2, 4, N }, context = ctx, polynomial_domain = "ntt", step = step }
      end
      assert.equal(3, rk(3).step)
      assert.equal(3, rk(11).step)
      assert.equal(-3, rk(5).step)
      assert.equal(3, rk(-5).step)
      assert.equal(4, rk(4).step)
      assert.equal(4, rk(-4).step)
      assert.equal(-1, rk(-1).step)
      assert.equal(3, rk(11):metadata().step)
      H.expect_error("ValueError", "step 8 is 0 modulo num_slots 8", rk, 8)
      H.expect_error("ValueError", "step 0 is 0 modulo num_slots 8", rk, 0)
      H.expect_error("ValueError", "RotationKey: step is required", fh.RotationKey,
        { data = u64 { 1, 2, 4, N }, context = ctx })
    end)

    it("reject impossible key states naming the field", function()
      H.expect_error("ValueError", "SecretKey: data must have layout %[limb, N%], got shape {1,4,16}", fh.SecretKey,
        { data = u64 { 1, 4, N }, context = ctx })
      H.expect_error("ValueError", "PublicKey: data must have layout %[2, limb, N%]", fh.PublicKey,
        { data = u64 { 3, 4, N }, context = ctx })
      H.expect_error("ValueError", "KeySwitchKey: data must have layout %[digit, 2, limb, N%]", fh.KeySwitchKey,
        { data = u64 { 2, 4, N }, context = ctx })
      H.expect_error("ValueError", "RelinearizationKey: data must have layout %[digit, 2, limb, N%]", fh.RelinearizationKey,
        { data = u64 { 0, 2, 4, N }, context = ctx })
      H.expect_error("StateError", "SecretKey: polynomial_domain \"ntt\" requires residue_representation \"montgomery\"",
        fh.SecretKey, { data = u64 { 4, N }, context = ctx, polynomial_domain = "ntt", residue_representation = "standard" })
      H.expect_error("StateError", "SecretKey: polynomial_domain \"coefficient\" requires residue_representation \"standard\"",
        fh.SecretKey, { data = u64 { 4, N }, context = ctx, residue_representation = "montgomery" })
      H.expect_error("ValueError", "SecretKey has no metadata field 'scale'", fh.SecretKey,
        { data = u64 { 4, N }, context = ctx, scale = 2 })
      H.expect_error("ValueError", "SecretKey has no metadata field 'level'", fh.SecretKey,
        { data = u64 { 4, N }, context = ctx, level = 0 })
      H.expect_error("StateError", "SecretKey: data has 3 limb rows but prime_ids lists 4 primes", fh.SecretKey,
        { data = u64 { 3, N }, context = ctx })
      H.expect_error("StateError", "prime rows start at level 2, outside %[0, 1%]", fh.SecretKey,
        { data = u64 { 2, N }, context = ctx, prime_ids = { 2, 3 } })
      H.expect_error("StateError", "prime_ids {0,1,2,3} are not the active rows of level 0 with modulus_basis Q",
        fh.SecretKey, { data = u64 { 4, N }, context = ctx, modulus_basis = "Q", prime_ids = { 0, 1, 2, 3 } })
      H.expect_error("ValueError", "a CKKS context is required", fh.PublicKey, { data = u64 { 2, 4, N } })
    end)
  end)

  describe("movement and copies", function()
    it("clones into new storage with equal state and contents", function()
      local ct = fh.Ciphertext { data = seq({ 2, 3, N }, 7), context = ctx, level = 0, polynomial_domain = "ntt" }
      local c = ct:clone()
      assert.are_not.equal(ct.data:data_ptr(), c.data:data_ptr())
      assert.is_true(c:equal(ct))
      assert.is_true(fh.value_equal(c, ct))
      assert.equal(tostring(ct), tostring(c))
      local cpu = ct:cpu()
      assert.is_true(cpu:equal(ct))
      assert.equal("cpu", ct:to("cpu").device)
      local pinned = ct:to("cpu", { pin_memory = false })
      assert.is_true(pinned:equal(ct))
    end)

    it("compares state and contents in equal()", function()
      local a = fh.Ciphertext { data = seq({ 2, 3, N }), context = ctx }
      local b = fh.Ciphertext { data = seq({ 2, 3, N }, 1), context = ctx }
      local c = fh.Ciphertext { data = seq({ 2, 3, N }), context = ctx, scale = 3 }
      assert.is_false(a:equal(b))
      assert.is_false(a:equal(c))
      assert.is_false(a:equal(a.data))
      assert.is_true(a:equal(fh.Ciphertext { data = seq({ 2, 3, N }), context = ctx }))
    end)

    it("refuses CUDA without a GPU and pinned non-CPU targets", function()
      local ct = fh.Ciphertext { data = u64 { 2, 3, N }, context = ctx }
      H.expect_error("ValueError", "pin_memory=true requires device \"cpu\"", ct.to, ct, "cuda:0", { pin_memory = true })
      H.expect_error("ValueError", "unknown option 'pin'", ct.to, ct, "cpu", { pin = true })
      H.expect_error("ValueError", "invalid device string", ct.to, ct, "gpu")
      if not H.has_gpu then H.expect_error("CudaError", "", ct.to, ct, "cuda") end
    end)

    H.gpu_it("moves every value type to CUDA and back unchanged", function()
      local vals = {
        fh.Ciphertext { data = seq({ 2, 3, N }), context = ctx, polynomial_domain = "ntt" },
        fh.Plaintext { message = fh.randn({ 4 }, { dtype = "float64" }), scale = 8 },
        fh.Plaintext { data = seq({ 2, N }), context = ctx, level = 1 },
        fh.SecretKey { data = seq({ 4, N }), context = ctx },
        fh.RotationKey { data = seq({ 1, 2, 4, N }), context = ctx, step = 2, polynomial_domain = "ntt" },
      }
      for _, v in ipairs(vals) do
        local g = v:to("cuda")
        assert.equal("cuda:0", g.device)
        assert.is_true(g:equal(v))
        local back = g:cpu()
        assert.equal("cpu", back.device)
        assert.is_true(back:equal(v))
        assert.is_true(v:cuda():equal(v))
      end
    end)
  end)

  describe("argument errors", function()
    it("name the function and the argument", function()
      local ct = fh.Ciphertext { data = u64 { 2, 3, N }, context = ctx }
      -- a method looked up on a Ciphertext is named Ciphertext:<method>, whatever self it is then called on
      H.expect_error("TypeError", "^Ciphertext:metadata: expected a CKKS value %(Plaintext, Ciphertext or a key%), got table",
        ct.metadata, {})
      H.expect_error("TypeError", "^Ciphertext:clone: expected a CKKS value", ct.clone, fh.ones(1))
      H.expect_error("TypeError", "^Ciphertext:to: argument 1 %(device%) expected a device string, got number", ct.to, ct, 0)
      H.expect_error("ValueError", "^Ciphertext:cuda: device must be an integer", ct.cuda, ct, -1)
      H.expect_error("TypeError", "fh.context_lookup: argument 1 %(id%) expected a string, got number", fh.context_lookup, 1)
      H.expect_error("ValueError", "ring_degree must be an integer", fh.ckks_security_budget_bits, 1.5)
      H.expect_error("TypeError", "fh.is_prime: argument 1 %(n%) expected an integer", fh.is_prime, "7")
      H.expect_error("ValueError", "p_primes%[1%]: value %-97 is out of range for uint64", fh.CkksContext,
        { ring_degree = 16, default_scale = 1, q_primes = ctx.q_primes, p_primes = { -97 }, enforce_security_budget = false })
    end)

    it("of contexts, constructors and value files", function()
      local data = u64 { 2, 3, N }
      local fields = { data = data, context = ctx }
      for i = 1, 40 do fields["f" .. i] = 1 end
      H.expect_error("ValueError", "fh.Ciphertext: too many fields %(unknown field 'f%d+'%?%)", fh.Ciphertext, fields)
      local ids = {}
      for i = 1, 200 do ids[i] = 0 end
      H.expect_error("StateError", "fh.Ciphertext: field 'prime_ids' lists 200 entries, more than the 128 primes a "
        .. "context can have", fh.Ciphertext, { data = data, context = ctx, prime_ids = ids })
      H.expect_error("ValueError", "fh.Ciphertext: context and context_id disagree %(" .. ctx.id:sub(1, 16)
        .. "%.%.%. vs abc%.%.%.%)", fh.Ciphertext, { data = data, context = ctx, context_id = "abc" })
      local env = fh.envelope(fh.Ciphertext { data = data, context = ctx })
      env.tensors = {}
      for i = 1, 40 do env.tensors["t" .. i] = fh.ones(1) end
      H.expect_error("ValueError", "fh.from_envelope: more than 4 tensors", fh.from_envelope, env)
      H.expect_error("TypeError", "fh.value_equal: argument 1 %(a%) expected a CKKS value %(Plaintext, Ciphertext or a "
        .. "key%), got number", fh.value_equal, 5, 5)
      H.expect_error("TypeError", "fh.CkksContext: expected a preset name or a parameter table, got number",
        fh.CkksContext, 5)
      H.expect_error("ValueError", "fh.CkksContext: ring_degree is required", fh.CkksContext, { q_primes = {} })
      H.expect_error("TypeError", "a CkksContext is immutable %(cannot assign field 'ring_degree'%)",
        function() ctx.ring_degree = 5 end)
      H.expect_error("TypeError", "fh.Ciphertext: context expected a CkksContext, got number", fh.Ciphertext,
        { data = u64 { 2, 3, N }, context = 5 })
      local ct = fh.Ciphertext { data = u64 { 2, 3, N }, context = ctx }
      local path = os.tmpname()
      H.expect_error("ValueError", 'fh.save: option \'format\' must be "fhelium" or "fhelium%-0.30", got "x"', fh.save,
        { ct }, path, { format = "x" })
      H.expect_error("TypeError", "fh.save: option 'format' expected a string, got number", fh.save, { ct }, path,
        { format = 5 })
      H.expect_error("ValueError", "fh.save: argument 2 %(path%) must not contain a NUL byte %(at byte 5 of 9%)", fh.save,
        { ct }, "/tmp\0x.fh")
      H.expect_error("TypeError", "fh.load: option 'context' expected a CkksContext or a preset name, got number",
        fh.load, path, { context = 5 })
      os.remove(path)
    end)
  end)

  describe("envelopes", function()
    it("describe a value exactly and rebuild an equal one", function()
      local vals = {
        fh.Ciphertext { data = seq({ 3, 2, 2, N }), context = ctx, level = 1, scale = 3.25, polynomial_domain = "ntt" },
        fh.Plaintext { message = fh.tensor({ 1, 2 }, { dtype = "float64" }), scale = 8 },
        fh.Plaintext { message = fh.tensor({ 1, 2 }, { dtype = "float64" }), scale = 8, context = ctx, level = 1 },
        fh.Plaintext { data = seq({ 2, N }), context = ctx, level = 1, residue_representation = "montgomery" },
        fh.SecretKey { data = seq({ 4, N }), context = ctx },
        fh.PublicKey { data = seq({ 2, 4, N }), context = ctx },
        fh.KeySwitchKey { data = seq({ 2, 2, 4, N }), context = ctx },
        fh.RelinearizationKey { data = seq({ 2, 2, 4, N }), context = ctx },
        fh.RotationKey { data = seq({ 2, 2, 4, N }), context = ctx, step = -2 },
        fh.ConjugationKey { data = seq({ 2, 2, 4, N }), context = ctx },
      }
      for _, v in ipairs(vals) do
        local env = fh.envelope(v)
        assert.equal(v.type, env.value_type)
        assert.equal(1, env.schema_version)
        assert.equal(v.context_id, env.context_id)
        assert.same(v:metadata(), env.metadata)
        local name = v.representation == "slots" and "message" or "data"
        assert.same({ name }, (function() local k = {} for n in pairs(env.tensors) do k[#k + 1] = n end return k end)())
        assert.equal(v[name]:data_ptr(), env.tensors[name]:data_ptr()) -- shares the payload
        local back = fh.from_envelope(env)
        assert.is_true(back:equal(v), tostring(v))
        assert.equal(tostring(v), tostring(back))
        if v.context then assert.is_true(fh.from_envelope(env, { context = ctx }):equal(v)) end
      end
    end)

    it("reject malformed envelopes naming the problem", function()
      local ct = fh.Ciphertext { data = seq({ 2, 3, N }), context = ctx }
      local function env(changes, meta_changes)
        local e = fh.envelope(ct)
        for k, v in pairs(changes or {}) do e[k] = v end
        for k, v in pairs(meta_changes or {}) do e.metadata[k] = v end
        return e
      end
      H.expect_error("ValueError", "value_type must be one of .*, got \"Cyphertext\"", fh.from_envelope,
        env { value_type = "Cyphertext" })
      H.expect_error("TypeError", "value_type expected a string", fh.from_envelope, env { value_type = 1 })
      H.expect_error("ValueError", "unsupported schema_version 2", fh.from_envelope, env { schema_version = 2 })
      H.expect_error("ValueError", "unknown context_id 'nope'", fh.from_envelope, env { context_id = "nope" })
      H.expect_error("ValueError", "context and context_id disagree", fh.from_envelope, env {}, { context = T.context { skip = 2 } })
      H.expect_error("ValueError", "a CKKS context is required", fh.from_envelope, env { context_id = "" })
      local missing = env()
      missing.metadata.scale = nil
      H.expect_error("ValueError", "metadata field 'scale' is missing", fh.from_envelope, missing)
      H.expect_error("ValueError", "unknown metadata field 'depth'", fh.from_envelope, env({}, { depth = 1 }))
      H.expect_error("ValueError", "expected a tensor named 'data', got 'payload'", fh.from_envelope,
        env { tensors = { payload = ct.data } })
      H.expect_error("ValueError", "expected one tensor 'data', got 2", fh.from_envelope,
        env { tensors = { data = ct.data, extra = ct.data } })
      H.expect_error("TypeError", "tensors%[\"data\"%] expected a Tensor, got number", fh.from_envelope,
        env { tensors = { data = 1 } })
      H.expect_error("ValueError", "unknown option 'extra'", fh.from_envelope, env { extra = 1 })
      H.expect_error("ValueError", "unknown option 'device'", fh.from_envelope, env {}, { device = "cpu" })
      H.expect_error("StateError", "requires residue_representation \"montgomery\"", fh.from_envelope,
        env({}, { polynomial_domain = "ntt" }))
      H.expect_error("TypeError", "expected an envelope table, got Ciphertext", fh.from_envelope, ct)
      H.expect_error("TypeError", "metadata expected a table, got string", fh.from_envelope, env { metadata = "x" })
      H.expect_error("TypeError", "tensors expected a table of named tensors, got Tensor", fh.from_envelope,
        env { tensors = ct.data })
      H.expect_error("TypeError", "schema_version expected a number", fh.from_envelope, env { schema_version = "1" })
      H.expect_error("TypeError", "context_id expected a string", fh.from_envelope, env { context_id = 1 })
      H.expect_error("ValueError", "tensor names must be strings", fh.from_envelope, env { tensors = { ct.data } })
      H.expect_error("ValueError", "more than 4 tensors", fh.from_envelope,
        env { tensors = { a = ct.data, b = ct.data, c = ct.data, d = ct.data, e = ct.data } })
      H.expect_error("TypeError", "option 'context' expected a CkksContext, got string", fh.from_envelope, env {},
        { context = ctx.id })
      H.expect_error("ValueError", "field names must be strings", fh.from_envelope, env { metadata = { 1 } })
      H.expect_error("TypeError", "expected a CKKS value", fh.envelope, {})
    end)
  end)
end)
