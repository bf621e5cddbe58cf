-- Interoperability with FHElium 0.30: its presets, and its value files in
-- both directions, against the files FHElium 0.30.0 wrote itself
-- (spec/fixtures/fhelium-0.30: a test key pair, a public key, a ciphertext of
-- a known message, plaintexts, the ternary secret in coefficient form;
-- fixture.json and presets.json record what FHElium says about them).
local ffi = require "ffi"
local json = require "dkjson"
local fh = require "fhelium"
local H = require "spec.helpers"
local C = fh.core._ckks

local DIR = "spec/fixtures/fhelium-0.30/"
local function read(path)
  local f = assert(io.open(path, "rb"))
  local s = f:read("*a")
  f:close()
  return s
end
local FX = json.decode(read(DIR .. "fixture.json"))
local PRESET = fh.Preset.slots8192_scale40_depth7_int64
local N, S = FX.N, FX.num_slots

-- the header of a safetensors file: length, the JSON text, the decoded table
local function header(bytes)
  local n = 0
  for i = 8, 1, -1 do n = n * 256 + bytes:byte(i) end
  local text = bytes:sub(9, 8 + n)
  return n, text, json.decode(text)
end
local function manifest(bytes)
  local _, _, h = header(bytes)
  return h.__metadata__["fhelium.manifest"], json.decode(h.__metadata__["fhelium.manifest"], 1, json.null)
end
-- the raw int64 / int8 elements of a file's entry `name`
local function entry(bytes, name, ctype)
  local n, _, h = header(bytes)
  local e = h[name]
  local p = ffi.cast(ctype .. "*", ffi.cast("const uint8_t*", bytes) + 8 + n + e.data_offsets[1])
  return p, (e.data_offsets[2] - e.data_offsets[1]) / ffi.sizeof(ctype), e
end
-- a copy of `bytes` whose header text went through edit(text) (length and padding redone)
local function rebuild(bytes, edit, data_edit)
  local n, text = header(bytes)
  local body = bytes:sub(9 + n)
  text = edit(text:gsub(" +$", ""))
  while #text % 8 ~= 0 do text = text .. " " end
  local len = {}
  local l = #text
  for i = 1, 8 do
    len[i] = string.char(l % 256)
    l = math.floor(l / 256)
  end
  if data_edit then body = data_edit(body) end
  return table.concat(len) .. text .. body
end
-- a header edit replacing the first `from` (plain text) by `to`
local function sub(from, to)
  return function(text)
    local i, j = text:find(from, 1, true)
    assert(i, "fixture header has no " .. from)
    return text:sub(1, i - 1) .. to .. text:sub(j + 1)
  end
end

local MESSAGE = {}
for k = 0, S - 1 do MESSAGE[k + 1] = k < 100 and 0.01 * k or 0 end
MESSAGE = fh.tensor(MESSAGE, { dtype = "float64" })

local FILES = { "secret_key", "public_key", "ciphertext", "plaintext", "plaintext_rns", "decrypted" }
local BYTES, VALUE = {}, {}
for _, f in ipairs(FILES) do BYTES[f] = read(DIR .. f .. ".safetensors") end
local function value(f)
  VALUE[f] = VALUE[f] or fh.load(DIR .. f .. ".safetensors")
  return VALUE[f]
end
local engine
local function E()
  engine = engine or fh.CkksEngine(PRESET, { seed = 11 })
  return engine
end

-- the integers of a JSON list's text, exactly (uint64_t; dkjson reads doubles)
local function u64list(body)
  local r = {}
  for digits in body:gmatch("%d+") do
    local v = 0ULL
    for d in digits:gmatch("%d") do v = v * 10ULL + (d:byte() - 48) end
    r[#r + 1] = v
  end
  return r
end
-- the Q and P primes of each preset, from presets.json's text
local function preset_primes(text, name)
  local block = text:match('"preset": "' .. name:gsub("%-", "%%-") .. '"(.-)}')
  local function list(key) return u64list(block:match('"' .. key .. '": %[(.-)%]')) end
  return list("q_moduli"), list("p_moduli")
end

describe("FHElium 0.30 presets", function()
  local text = read(DIR .. "presets.json")
  local dump = json.decode(text)

  it("are fh.Preset members with exactly FHElium's chains, default scales and Galois generator", function()
    assert.equal(17, #dump.presets)
    local info = {}
    for _, p in ipairs(require("fhelium.values").presets) do info[p.name] = p end
    for _, p in ipairs(dump.presets) do
      local member = p.preset:gsub("-", "_")
      assert.equal(p.preset, fh.Preset[member], member)
      local ctx = fh.CkksContext(fh.Preset[member])
      local q, pp = preset_primes(text, p.preset)
      assert.equal(#q, #p.q_moduli)
      assert.equal(2 ^ p.logN, ctx.ring_degree)
      assert.equal(p.default_scale, ctx.default_scale)
      assert.equal(p.galois_generator, ctx.galois_generator)
      assert.equal(#q, ctx.num_q_primes)
      assert.equal(#pp, ctx.num_p_primes)
      assert.equal(#q - 1, ctx.max_level) -- FHElium's depth runs to #Q - 1
      assert.equal(tonumber(p.preset:match("depth(%d+)")), ctx.max_level)
      assert.equal("below_p", ctx.key_digits)
      assert.equal(p.preset, ctx.preset)
      for i = 1, #q do assert.equal(q[i], ctx.q_primes[i], p.preset .. " q[" .. i .. "]") end
      for i = 1, #pp do assert.equal(pp[i], ctx.p_primes[i], p.preset .. " p[" .. i .. "]") end
      assert.is_true(ctx.modulus_bits <= ctx.security_budget_bits)
      assert.equal(p.preset:match("int%d+$"), info[p.preset].dtype)
      -- FHElium's digits: consecutive Q primes while their product stays below P
      local logp, digits, i = 0, 0, 1
      for _, x in ipairs(pp) do logp = logp + math.log(tonumber(x), 2) end
      while i <= #q do
        local acc = 0
        repeat
          acc = acc + math.log(tonumber(q[i]), 2)
          i = i + 1
        until i > #q or acc + math.log(tonumber(q[i]), 2) >= logp
        digits = digits + 1
      end
      assert.equal(digits, ctx.num_key_digits, p.preset)
    end
    -- the fixture's own record
    local ctx = fh.CkksContext(PRESET)
    assert.equal(FX.key_digit_count, ctx.num_key_digits)
    assert.equal(FX.galois_generator, ctx.galois_generator)
    assert.equal(FX.max_depth, ctx.max_level)
    local chain = u64list(read(DIR .. "fixture.json"):match('"moduli_qp_order": %[(.-)%]'))
    assert.equal(#chain, #ctx.primes)
    for i, q in ipairs(ctx.primes) do assert.equal(chain[i], q) end
    -- today's presets keep generator 5
    assert.equal(5, fh.CkksContext(fh.Preset.slots8192_scale40_levels7_int64).galois_generator)
  end)
end)

describe("FHElium 0.30 value files", function()
  it("load as values of the fixture's preset (found from the value, or given)", function()
    local ctx = fh.CkksContext(PRESET)
    local want = {
      secret_key = { "SecretKey", "QP", "ntt", "montgomery", 9 },
      public_key = { "PublicKey", "Q", "ntt", "montgomery", 8 },
      ciphertext = { "Ciphertext", "Q", "coefficient", "standard", 8 },
      plaintext_rns = { "Plaintext", "Q", "coefficient", "standard", 8 },
    }
    for f, w in pairs(want) do
      local v = value(f)
      assert.equal(w[1], v.type)
      assert.equal(ctx, v.context)
      assert.equal(w[2], v.modulus_basis)
      assert.equal(w[3], v.polynomial_domain)
      assert.equal(w[4], v.residue_representation)
      assert.equal(w[5], #v.prime_ids)
      assert.equal("uint64", v.data.dtype)
    end
    assert.equal(0, value("ciphertext").level)
    assert.equal(FX.default_scale, value("ciphertext").scale)
    assert.equal("integer_coefficients", value("plaintext").representation)
    assert.equal("int64", value("plaintext").data.dtype)
    assert.equal("approximate_coefficients", value("decrypted").representation)
    assert.equal("float64", value("decrypted").data.dtype)
    -- context= (a preset name or a CkksContext) gives the same values
    assert.is_true(fh.load(DIR .. "ciphertext.safetensors", { context = PRESET }):equal(value("ciphertext")))
    assert.is_true(fh.deserialize(BYTES.secret_key, { context = ctx }):equal(value("secret_key")))
    -- the files' own checksums, as fixture.json records them
    for _, f in ipairs(FILES) do assert.equal(FX.files[f].bytes, #BYTES[f]) end
  end)

  it("the secret key's NTT form (FHElium's order, radix 2^62) is the coefficient form's transform", function()
    local sk = value("secret_key")
    local sbytes = read(DIR .. "secret_coefficients.safetensors")
    local s8, count = entry(sbytes, "s", "int8_t")
    assert.equal(N, count)
    local ctx = sk.context
    local tb = C.tables(ctx.log_n, fh.tensor(ctx.primes, { dtype = "uint64" }):view(#ctx.primes), ctx.num_q_primes)
    local ids = sk.prime_ids
    local coeff = C.intt(tb, sk.data, ids) -- ours: Montgomery evaluations -> standard coefficients
    local rows = coeff:tolist()
    local counts = { [-1] = 0, [0] = 0, [1] = 0 }
    for k = 0, N - 1 do counts[s8[k]] = counts[s8[k]] + 1 end
    assert.equal(FX.files.secret_coefficients.counts["-1"], counts[-1])
    assert.equal(FX.files.secret_coefficients.counts["1"], counts[1])
    for r, id in ipairs(ids) do
      local q = ctx:prime(id)
      for k = 0, N - 1 do
        local s = s8[k]
        local want = s < 0 and q - 1ULL or ffi.cast("uint64_t", s)
        if rows[r][k + 1] ~= want then
          error(("prime id %d, coefficient %d: %s, expected %s"):format(id, k, tostring(rows[r][k + 1]), tostring(want)))
        end
      end
    end
    -- and back: our NTT of the coefficients is what was loaded
    assert.is_true(fh.equal(C.ntt(tb, coeff, ids), sk.data))
  end)

  it("decrypt: the ciphertext to fixture.json's message within 1e-6, with FHElium's own error", function()
    local e = E()
    local got = e:decrypt_message(value("ciphertext"), value("secret_key"), { is_real = true })
    local err = fh.max_abs_diff(got, MESSAGE)
    assert.is_true(err < 1e-6, err)
    assert.is_true(math.abs(err - FX.checks.decrypt_max_abs_err_live) < 1e-12, err)
    -- the first 100 slots, as FHElium measured them
    local first = fh.max_abs_diff(got:narrow(1, 1, 100), MESSAGE:narrow(1, 1, 100))
    assert.is_true(math.abs(first - FX.checks.decrypt_max_abs_err_first_slots) < 1e-12, first)
  end)

  it("decrypt: FHElium's plaintext and decrypted files decode to the values FHElium recorded", function()
    local e = E()
    -- FHElium's decryption (the phase as float64) decodes to its recorded error ...
    local dec = e:decode(value("decrypted"), { is_real = true })
    local err = fh.max_abs_diff(dec, MESSAGE)
    assert.is_true(math.abs(err - FX.checks.decrypt_max_abs_err_live) < 1e-12, err)
    -- ... and that phase is exactly ours: c0 + c1 s over Q, coefficient by coefficient
    local phase = e:decrypt(value("ciphertext"), value("secret_key"))
    local ints = fh.Plaintext { data = value("decrypted").data:to("int64"), context = phase.context, level = 0,
      scale = FX.default_scale, representation = "integer_coefficients" }
    assert.is_true(e:encode_plaintext(ints):equal(phase))
    -- the encoded message (integer coefficients) and its RNS form decode to the message
    for _, f in ipairs { "plaintext", "plaintext_rns" } do
      local d = fh.max_abs_diff(e:decode(value(f), { is_real = true }), MESSAGE)
      assert.is_true(d < 1e-9, f .. ": " .. d)
    end
    -- and the RNS form is the integer coefficients reduced mod each Q prime
    assert.is_true(e:encode_plaintext(value("plaintext")):equal(value("plaintext_rns")))
  end)

  it("encrypt: a new message with FHElium's public key decrypts with its secret key", function()
    local e = E()
    local g = fh.Generator(H.seed("fhelium 0.30 encrypt"))
    local x = fh.randn({ S }, { generator = g, dtype = "float64" }) * 0.1
    local ct = e:encrypt_message(x, value("public_key"))
    local err = fh.max_abs_diff(e:decrypt_message(ct, value("secret_key"), { is_real = true }), x)
    assert.is_true(err < 1e-6, err)
    -- an integer-coefficient plaintext encrypts as its RNS form does
    local cp = e:encrypt(value("plaintext"), value("public_key"))
    assert.is_true(fh.max_abs_diff(e:decrypt_message(cp, value("secret_key"), { is_real = true }), MESSAGE) < 1e-6)
  end)

  it("compute on the loaded ciphertext: add, multiply by a plaintext, rescale, rotate", function()
    local e = E()
    local sk, ct = value("secret_key"), value("ciphertext")
    local g = fh.Generator(H.seed("fhelium 0.30 compute"))
    local w = fh.randn({ S }, { generator = g, dtype = "float64" })
    local sum = e:add(ct, ct)
    assert.is_true(fh.max_abs_diff(e:decrypt_message(sum, sk, { is_real = true }), MESSAGE * 2) < 2e-6)
    local ntt = e:coefficient_domain_to_ntt_domain(ct)
    local prod = e:multiply_plaintext(ntt, e:prepare_plaintext_for_multiplication(e:encode(w)))
    local r = e:rescale_to_next_level(prod)
    assert.equal(1, r.level)
    assert.equal(FX.default_scale * FX.default_scale / tonumber(r.context:prime(0)), r.scale)
    local err = fh.max_abs_diff(e:decrypt_message(r, sk, { is_real = true }), MESSAGE * w)
    assert.is_true(err < 1e-5, err)
    -- relinearization and a rotation with keys made here for FHElium's secret key
    local rlk = e:create_relinearization_key(sk)
    local sq = e:rescale_to_next_level(e:relinearize(e:multiply(ntt, ntt), rlk))
    err = fh.max_abs_diff(e:decrypt_message(sq, sk, { is_real = true }), MESSAGE * MESSAGE)
    assert.is_true(err < 1e-5, err)
    e:create_rotation_key(sk, 3)
    local rot = e:rotate_by_step(ct, 3) -- torch.roll(m, 3): slot j + 3 holds m[j]
    local got = e:decrypt_message(rot, sk, { is_real = true }):tolist()
    for j = 0, 99 do assert.is_true(math.abs(got[j + 4] - 0.01 * j) < 1e-5, j) end
  end)

  it("save back with format fhelium-0.30: bit-identical on reload, header and manifest field for field", function()
    for _, f in ipairs(FILES) do
      local v = value(f)
      local out = fh.serialize(v, { format = "fhelium-0.30", allow_secret = true })
      -- loading it again gives the same value, bit for bit
      assert.is_true(fh.deserialize(out):equal(v), f)
      -- the manifest byte for byte, every header field
      local m1 = manifest(BYTES[f])
      local m2 = manifest(out)
      assert.equal(m1, m2, f)
      local n1, _, h1 = header(BYTES[f])
      local n2, _, h2 = header(out)
      assert.equal(n1, n2, f)
      assert.are.same(h1, h2, f)
      assert.equal(#BYTES[f], #out)
      -- the data: canonical residues are FHElium's bytes; lazy ones ([q, 2q)) their reduction
      local d = FX.files[f].value_metadata
      if f == "ciphertext" or f == "plaintext" or f == "decrypted" then
        assert.equal(BYTES[f]:sub(9 + n1), out:sub(9 + n2), f)
      else
        local a, count = entry(BYTES[f], "data", "int64_t")
        local b = entry(out, "data", "int64_t")
        local lazy = 0
        for i = 0, count - 1 do
          local q = ffi.cast("int64_t", v.context:prime(d.prime_ids[math.floor(i / N) % #d.prime_ids + 1]))
          local x = a[i]
          if x >= q then
            x = x - q
            lazy = lazy + 1
          end
          if b[i] ~= x then error(("%s element %d: %s, expected %s"):format(f, i, tostring(b[i]), tostring(x))) end
        end
        assert.is_true(lazy > 0, f) -- FHElium's files do hold lazy residues
      end
    end
    -- FHElium's writer orders __metadata__ as it likes; where it chose ours the file is byte-identical
    assert.equal(BYTES.decrypted, fh.serialize(value("decrypted"), { format = "fhelium-0.30" }))
  end)

  it("fh.save writes the same bytes, atomically, and still needs allow_secret for a secret key", function()
    local path = os.tmpname()
    os.remove(path)
    fh.save(value("ciphertext"), path, { format = "fhelium-0.30" })
    assert.equal(fh.serialize(value("ciphertext"), { format = "fhelium-0.30" }), read(path))
    H.expect_error("ValueError", { "fh.save", "refusing to save a SecretKey", "allow_secret=true" }, fh.save,
      value("secret_key"), path, { format = "fhelium-0.30", overwrite = true })
    H.expect_error("ValueError", { "fh.serialize", "refusing to save a SecretKey" }, fh.serialize, value("secret_key"),
      { format = "fhelium-0.30" })
    fh.save(value("secret_key"), path, { format = "fhelium-0.30", overwrite = true, allow_secret = true })
    assert.is_true(fh.load(path):equal(value("secret_key")))
    os.remove(path)
  end)

  it("keys made here (relinearization, rotation, conjugation) and other values round-trip both ways", function()
    local e = E()
    local sk = value("secret_key")
    local keys = { e:create_relinearization_key(sk), e:create_rotation_key(sk, 5), e:create_rotation_key(sk, S / 2),
      e:create_rotation_key(sk, -7), e:create_conjugation_key(sk), e:create_public_key(sk) }
    for _, k in ipairs(keys) do
      local b = fh.serialize(k, { format = "fhelium-0.30" })
      local _, m = manifest(b)
      assert.equal(k.type, m.value_type)
      assert.equal("torch.int64", m.tensor_metadata.data.dtype)
      if k.type == "RotationKey" then
        -- FHElium normalizes steps into [-S/2, S/2): S/2 is written -S/2
        assert.equal(k.step == S / 2 and -S / 2 or k.step, m.value_metadata.rotation_step)
      end
      if k.type ~= "PublicKey" then assert.equal(FX.key_digit_count, m.tensor_metadata.data.shape[1]) end
      assert.is_true(fh.deserialize(b):equal(k))
    end
    -- a ciphertext at depth 2 in the NTT domain, a 3-component one, a slots plaintext (complex, split in two
    -- payloads) and an NTT-domain RNS plaintext
    local ct = e:coefficient_domain_to_ntt_domain(value("ciphertext"))
    local deep = e:rescale_to_next_level(e:rescale_to_next_level(ct))
    local three = e:multiply(ct, ct)
    local z = fh.tensor({ { 1, 2 }, { 3, -4 } }, { dtype = "complex128" })
    local slots = fh.Plaintext { message = z, level = 1, scale = 2 ^ 30 }
    local ntt_pt = e:coefficient_domain_to_ntt_domain(e:encode(fh.tensor({ 0.5, 0.25 }, { dtype = "float64" })))
    for _, v in ipairs { deep, three, slots, ntt_pt } do
      local b = fh.serialize(v, { format = "fhelium-0.30" })
      local back = fh.deserialize(b)
      assert.is_true(back:equal(v), tostring(v))
    end
    local _, m = manifest(fh.serialize(slots, { format = "fhelium-0.30" }))
    assert.are.same({ "message.real", "message.imag" }, m.tensor_metadata.message.payloads)
    assert.equal("complex_split", m.tensor_metadata.message.encoding)
    assert.equal(json.null, m.value_metadata.polynomial_domain)
    local _, md = manifest(fh.serialize(deep, { format = "fhelium-0.30" }))
    assert.equal(2, md.value_metadata.depth)
    assert.are.same({ 2, 3, 4, 5, 6, 7 }, md.value_metadata.prime_ids)
    -- scales are written as Python's json writes floats (repr: the shortest digits that read back)
    local function scale_text(v) return fh.serialize(v, { format = "fhelium-0.30" }):match('\\"scale\\":([^,}]+)') end
    assert.equal("9.0949264179662e-13", scale_text(deep)) -- Python: 2.0**40 / q0 / q1
    for x, py in pairs { [2 ^ 40] = "1099511627776.0", [2 ^ -40] = "9.094947017729282e-13", [1e16] = "1e+16",
      [1e15] = "1000000000000000.0", [1e-4] = "0.0001", [1e-5] = "1e-05", [1.5e-7] = "1.5e-07",
      [123456789012345680] = "1.2345678901234568e+17", [0.1] = "0.1", [1099513200641.25] = "1099513200641.25" } do
      assert.equal(py, scale_text(fh.Plaintext { message = fh.tensor({ 1 }, { dtype = "float64" }), scale = x }))
    end
    -- the coefficient plaintexts round-trip through fhelium's own files too
    for _, f in ipairs { "plaintext", "decrypted" } do
      assert.is_true(fh.deserialize(fh.serialize(value(f))):equal(value(f)))
    end
  end)

  it("writes and reads the int32 presets' residues (int32, Montgomery radix 2^30)", function()
    local e = fh.CkksEngine(fh.Preset.slots8192_scale25_depth14_int32, { seed = 2 })
    local sk = e:create_secret_key()
    local x = fh.tensor({ 0.5, -0.25, 0.125 }, { dtype = "float64" })
    local ct = e:coefficient_domain_to_ntt_domain(e:encrypt_message(x, e:create_public_key(sk)))
    for _, v in ipairs { sk, ct, e:create_relinearization_key(sk) } do
      local b = fh.serialize(v, { format = "fhelium-0.30", allow_secret = true })
      local _, m = manifest(b)
      assert.equal("torch.int32", m.tensor_metadata.data.dtype)
      local n, _, h = header(b)
      assert.equal("I32", h.data.dtype)
      assert.is_true(n > 0)
      local back = fh.deserialize(b)
      assert.is_true(back:equal(v))
      assert.equal(v.context, back.context) -- the int32 preset, found from the int32 residues
    end
    local got = e:decrypt_message(fh.deserialize(fh.serialize(ct, { format = "fhelium-0.30" })), sk, { is_real = true })
    assert.is_true(fh.max_abs_diff(got:narrow(1, 1, 3), x) < 2e-2) -- scale 2^25: fresh noise ~ 1e-3
  end)

  it("refuses what FHElium 0.30 could not read", function()
    local five = fh.CkksEngine(fh.Preset.slots8192_scale40_levels7_int64)
    local pt = five:encode(fh.tensor({ 1 }, { dtype = "float64" }))
    H.expect_error("ValueError", { "fh.serialize", "format fhelium%-0.30", "galois_generator 5" }, fh.serialize, pt,
      { format = "fhelium-0.30" })
    local T = require "spec.fixtures.small_context"
    local small = T.context030()
    local function other(t) return fh.CkksContext {
      ring_degree = 16, default_scale = 2 ^ 20, q_primes = small.q_primes, p_primes = small.p_primes,
      enforce_security_budget = false, galois_generator = 3, max_level = t.max_level, key_digits = t.key_digits } end
    local function coeffs(ctx) return fh.Plaintext { data = fh.zeros({ 16 }, { dtype = "int64" }), context = ctx,
      representation = "integer_coefficients" } end
    H.expect_error("ValueError", { "format fhelium%-0.30", "max_level 1 = #q_primes %- 2" }, fh.serialize,
      coeffs(other { max_level = 1, key_digits = "below_p" }), { format = "fhelium-0.30" })
    H.expect_error("ValueError", { "format fhelium%-0.30", "key_digits \"p_count\"" }, fh.serialize,
      coeffs(other { max_level = 2, key_digits = "p_count" }), { format = "fhelium-0.30" })
    local wide, c = {}, 2ULL ^ 61 + 1 -- primes = 1 mod 32 below 2^61 (above FHElium's 2^60 bound)
    while #wide < 3 do
      c = c - 32
      if fh.is_prime(c) then wide[#wide + 1] = c end
    end
    local big = fh.CkksContext { ring_degree = 16, default_scale = 2 ^ 20, q_primes = { wide[1], wide[2] },
      p_primes = { wide[3] }, enforce_security_budget = false, galois_generator = 3, max_level = 1,
      key_digits = "below_p" }
    H.expect_error("ValueError", { "format fhelium%-0.30", "not below 2%^60" }, fh.serialize, coeffs(big),
      { format = "fhelium-0.30" })
    H.expect_error("ValueError", { "fh.serialize", "holds exactly one value", "got a list" }, fh.serialize,
      { value("ciphertext"), value("ciphertext") }, { format = "fhelium-0.30" })
    H.expect_error("ValueError", { "fh.serialize", "holds exactly one value", "got a tensor" }, fh.serialize,
      fh.zeros({ 2 }), { format = "fhelium-0.30" })
    H.expect_error("ValueError", { "fh.save", "option 'format' must be \"fhelium\" or \"fhelium%-0.30\"", "0.29" },
      fh.save, value("ciphertext"), "/tmp/x", { format = "fhelium-0.29" })
    H.expect_error("TypeError", { "fh.serialize", "option 'format' expected a string" }, fh.serialize,
      value("ciphertext"), { format = 30 })
    H.expect_error("ValueError", { "fh.serialize", "0%-dim message" }, fh.serialize,
      fh.Plaintext { message = 1.5, scale = 2 }, { format = "fhelium-0.30" })
  end)

  describe("refuses corrupted or unknown files with the right error, and loads nothing", function()
    local ct = BYTES.ciphertext
    local function refuse(kind, patterns, bytes, opts)
      local err = H.expect_error(kind, patterns, fh.deserialize, bytes, opts)
      assert.truthy(err.message:find("^fh.deserialize"), err.message)
    end
    local cases = {
      { "another file schema", sub('"fhelium.schema_version":"2"', '"fhelium.schema_version":"3"'),
        { "unsupported FHElium value file", "fhelium.schema_version is \"3\"", "reads FHElium 0.30's \"2\"" } },
      { "another format", sub('"fhelium.format":"fhelium-value"', '"fhelium.format":"fhelium-blob"'),
        { "unsupported FHElium value file", "fhelium.format is \"fhelium%-blob\"" } },
      { "another value schema", sub('value_schema_version\\":4', 'value_schema_version\\":3'),
        { "unsupported", "value_schema_version 3", "reads FHElium 0.30's 4" } },
      { "another manifest file schema", sub('file_schema_version\\":2', 'file_schema_version\\":1'),
        { "unsupported", "file_schema_version 1" } },
      { "an unknown value type", sub('value_type\\":\\"Ciphertext', 'value_type\\":\\"CompressedPlaintext'),
        { "unsupported", "value_type \"CompressedPlaintext\"" } },
      { "schema 3's level for depth", sub('\\"depth\\":0', '\\"level\\":0'),
        { "corrupt FHElium value file", "missing field 'depth'" } },
      { "an unknown value field", sub('\\"depth\\":0', '\\"depth\\":0,\\"extra\\":1'),
        { "unsupported", "unknown field 'extra'" } },
      { "an unknown manifest field", sub('\\"nbytes\\"', '\\"checksum\\":1,\\"nbytes\\"'),
        { "unsupported", "fhelium.manifest has an unknown field 'checksum'" } },
      { "an unknown tensor field", sub('\\"encoding\\"', '\\"compression\\":\\"zstd\\",\\"encoding\\"'),
        { "unsupported", "tensor_metadata.data has an unknown field 'compression'" } },
      { "an unknown encoding", sub('\\"direct\\"', '\\"zstd\\"'), { "unsupported", "encoding \"zstd\"" } },
      { "an unknown dtype", sub('torch.int64', 'torch.float32'), { "unsupported", "dtype \"torch.float32\"" } },
      { "an unknown residue representation", sub('\\"standard\\"', '\\"lazy\\"'),
        { "unsupported", "residue_representation \"lazy\"" } },
      { "an unknown domain", sub('\\"coefficient\\"', '\\"eval\\"'), { "unsupported", "polynomial_domain \"eval\"" } },
      { "an unknown __metadata__ key", sub('"fhelium.format"', '"fhelium.comment":"x","fhelium.format"'),
        { "unsupported", "__metadata__ has an unknown key 'fhelium.comment'" } },
      { "a missing manifest", sub('"fhelium.manifest"', '"fhelium.manifesto"'), { "unsupported", "fhelium.manifesto" } },
      { "a wrong byte count", sub('nbytes\\":2097152', 'nbytes\\":2097151'), { "corrupt", "nbytes is 2097151" } },
      { "a payload that is not in the file", sub('payloads\\":[\\"data\\"]', 'payloads\\":[\\"blob\\"]'),
        { "corrupt", "payload 'blob'" } },
      { "a shape other than the entry's", sub('shape\\":[2,8,16384]', 'shape\\":[2,4,32768]'),
        { "corrupt", "payload 'data' has another shape than tensor_metadata.data.shape" } },
      { "a dtype other than the entry's",
        function(t) return sub('nbytes\\":2097152', 'nbytes\\":1048576')(sub('torch.int64', 'torch.int32')(t)) end,
        { "corrupt", "payload 'data' is stored as I64, tensor_metadata.data.dtype is torch.int32" } },
      { "unsorted prime ids", sub('prime_ids\\":[0,1,', 'prime_ids\\":[1,0,'), { "corrupt", "strictly increasing" } },
      { "a null residue representation", sub('\\"standard\\"', 'null'),
        { "corrupt", "residue_representation of an RNS value must not be null" } },
      { "a coefficient-domain ciphertext in Montgomery form", sub('\\"standard\\"', '\\"montgomery\\"'),
        { "corrupt", "coefficient%-domain Ciphertext must have standard residues" } },
      { "a second tensor", sub('\\"tensor_metadata\\":{', '\\"tensor_metadata\\":{\\"mask\\":{},'),
        { "corrupt", "names tensor 'mask'", "exactly one tensor, 'data'" } },
      { "two payloads for a direct tensor", sub('payloads\\":[\\"data\\"]', 'payloads\\":[\\"data\\",\\"x\\"]'),
        { "corrupt", "payloads must list 1 payload name" } },
      { "complex_split for an integer tensor", sub('\\"direct\\"', '\\"complex_split\\"'),
        { "corrupt", "encoding must be \"direct\" for dtype torch.int64" } },
      { "ntt with standard residues", sub('\\"coefficient\\"', '\\"ntt\\"'),
        { "corrupt", "NTT%-domain value must have residue_representation \"montgomery\"" } },
      { "a manifest that is not JSON", sub('{\\"file_schema_version', '{\\"file_schema_version\\":}'),
        { "corrupt", "fhelium.manifest is not valid JSON" } },
      { "prime ids of no preset", sub('prime_ids\\":[0,1,2,3,4,5,6,7]', 'prime_ids\\":[1,2,3,4,5,6,7,8]'),
        { "context", "matches no FHElium 0.30 preset", "carries no chain", "pass context=" } },
      { "a negative scale", sub('scale\\":1099511627776.0', 'scale\\":-1.0'), { "corrupt", "scale must be finite" } },
    }
    for _, c in ipairs(cases) do
      it(c[1], function() refuse("ValueError", c[3], rebuild(ct, c[2])) end)
    end

    local pt = BYTES.plaintext
    local pt_cases = {
      { "no payload flag", sub('has_data\\":true', 'has_data\\":false'),
        { "corrupt", "exactly one of has_message, has_data" } },
      { "both payload flags", sub('has_message\\":false', 'has_message\\":true'),
        { "corrupt", "exactly one of has_message, has_data" } },
      { "slots without a message", sub('\\"integer_coefficients\\"', '\\"slots\\"'),
        { "corrupt", "representation \"slots\" does not match has_message" } },
      { "an unknown representation", sub('\\"integer_coefficients\\"', '\\"sparse\\"'),
        { "unsupported", "representation \"sparse\"" } },
      { "coefficients without their domain", sub('polynomial_domain\\":\\"coefficient\\"', 'polynomial_domain\\":null'),
        { "corrupt", "integer_coefficients Plaintext must have polynomial_domain \"coefficient\"" } },
      { "coefficients with a basis", sub('modulus_basis\\":null', 'modulus_basis\\":\\"Q\\"'),
        { "corrupt", "integer_coefficients Plaintext cannot have modulus_basis" } },
      { "a non-boolean flag", sub('has_data\\":true', 'has_data\\":1'), { "corrupt", "has_data must be a boolean" } },
      { "a fractional depth", sub('depth\\":0', 'depth\\":0.5'), { "corrupt", "depth must be an integer" } },
    }
    for _, c in ipairs(pt_cases) do
      it(c[1], function() refuse("ValueError", c[3], rebuild(pt, c[2])) end)
    end

    it("a dtype the value type does not take", function()
      local bad = rebuild(BYTES.decrypted, sub('\\"approximate_coefficients\\"', '\\"integer_coefficients\\"'))
      refuse("ValueError", { "unsupported", "tensor 'data' of this Plaintext has dtype torch.float64" }, bad)
    end)

    it("a key's fields", function()
      local e = E()
      local rk = fh.serialize(e:create_rotation_key(value("secret_key"), 9), { format = "fhelium-0.30" })
      refuse("ValueError", { "corrupt", "value_metadata of a RotationKey is missing field 'rotation_step'" },
        rebuild(rk, sub(',\\"rotation_step\\":9', '')))
      refuse("ValueError", { "unsupported", "value_metadata of a SecretKey has an unknown field 'depth'" },
        rebuild(BYTES.secret_key, sub('{\\"modulus_basis', '{\\"depth\\":0,\\"modulus_basis')))
      refuse("ValueError", { "corrupt", "polynomial_domain of an RNS value must not be null" },
        rebuild(BYTES.public_key, sub('\\"ntt\\"', 'null')))
      refuse("ValueError", { "RotationKey", "0 modulo num_slots" }, rebuild(rk, sub('rotation_step\\":9', 'rotation_step\\":8192')))
    end)

    it("a residue outside [0, 2q)", function()
      local bad = rebuild(ct, function(t) return t end, function(body)
        return ("\255"):rep(8) .. body:sub(9) -- -1 as the first int64
      end)
      refuse("ValueError", { "corrupt", "residue %-1 of row 0 is outside %[0, 2q%)" }, bad)
    end)

    it("a truncated file or header", function()
      H.expect_error("ValueError", "truncated safetensors data", fh.deserialize, ct:sub(1, 300))
      H.expect_error("ValueError", "", fh.deserialize, ct:sub(1, #ct - 8))
    end)

    it("a context that does not fit, or context= for an fhelium file", function()
      local err = H.expect_error("StateError", { "context", "ring_degree 32768", "16384 coefficients" }, fh.deserialize,
        ct, { context = fh.Preset.slots16384_scale40_depth16_int64 })
      assert.truthy(err.message:find("^fh.deserialize"))
      H.expect_error("StateError", "prime_ids", fh.deserialize, ct, { context = fh.Preset.slots8192_scale30_depth9_int64 })
      -- a context outside FHElium's layout would take its residues for another chain's
      H.expect_error("ValueError", { "context", "galois_generator 5", "FHElium 0.30's values" }, fh.deserialize, ct,
        { context = fh.Preset.slots8192_scale40_levels7_int64 })
      local own = fh.serialize(value("ciphertext"))
      H.expect_error("ValueError", { "context", "records its contexts" }, fh.deserialize, own, { context = PRESET })
      H.expect_error("ValueError", { "option 'context'", "unknown preset" }, fh.deserialize, ct, { context = "slots1" })
      H.expect_error("TypeError", { "option 'context' expected a CkksContext or a preset name" }, fh.deserialize, ct,
        { context = 3 })
    end)

    it("a value that fits several presets without context=", function()
      -- integer coefficients at depth 1 of a 16384-coefficient ring: the three int64 presets and the int32 one
      local pt = fh.serialize(value("plaintext"), { format = "fhelium-0.30" })
      local deep = rebuild(pt, sub('\\"depth\\":0', '\\"depth\\":1'))
      H.expect_error("ValueError", { "context", "fits several FHElium 0.30 presets", "slots8192%-scale30%-depth9%-int64",
        "pass context=" }, fh.deserialize, deep)
      local v = fh.deserialize(deep, { context = PRESET })
      assert.equal(1, v.level)
    end)

    it("an older schema 1 file keeps loading, and another fhelium schema is named", function()
      local own = fh.serialize(value("ciphertext"))
      assert.is_true(fh.deserialize(own):equal(value("ciphertext")))
      local bad = rebuild(own, sub('"fhelium.schema_version":"1"', '"fhelium.schema_version":"7"'))
      H.expect_error("ValueError", { "unsupported value file: fhelium.schema_version is \"7\"", "reads 1",
        "FHElium 0.30's schema 2" }, fh.deserialize, bad)
    end)
  end)
end)

describe("coefficient plaintexts (FHElium's integer_coefficients and approximate_coefficients)", function()
  it("construct, decode, convert to RNS and encrypt, with their own state", function()
    local e = E()
    local ctx = e.context
    local ints = value("plaintext").data
    local pt = fh.Plaintext { data = ints, context = ctx, representation = "integer_coefficients", scale = 2 ^ 40 }
    assert.equal("integer_coefficients", pt.representation)
    assert.is_nil(pt.prime_ids)
    assert.is_nil(pt.modulus_basis)
    assert.are.same({}, pt.batch_shape)
    assert.are.same({ "level", "representation", "scale" }, (function()
      local k = {}
      for name in pairs(pt:metadata()) do k[#k + 1] = name end
      table.sort(k)
      return k
    end)())
    assert.is_true(pt:equal(value("plaintext")))
    -- a batch decodes per row; the float64 form decodes alike
    local two = fh.empty({ 2, N }, { dtype = "int64" })
    two:select(1, 1):copy_(ints)
    two:select(1, 2):copy_(ints * 2)
    local batch = fh.Plaintext { data = two, context = ctx,
      representation = "integer_coefficients", scale = 2 ^ 40 }
    assert.are.same({ 2 }, batch.batch_shape)
    local d = e:decode(batch, { is_real = true })
    assert.is_true(fh.max_abs_diff(d:select(1, 2), MESSAGE * 2) < 1e-9)
    local approx = fh.Plaintext { data = ints:to("float64"), context = ctx,
      representation = "approximate_coefficients", scale = 2 ^ 40 }
    assert.is_true(fh.max_abs_diff(e:decode(approx), e:decode(pt)) < 1e-12)
    -- to RNS at its level, exactly
    local deep = fh.Plaintext { data = ints, context = ctx, representation = "integer_coefficients", scale = 2 ^ 40,
      level = 3 }
    local rns = e:encode_plaintext(deep)
    assert.equal(3, rns.level)
    assert.are.same({ 3, 4, 5, 6, 7 }, rns.prime_ids)
    assert.is_true(fh.equal(rns.data, value("plaintext_rns").data:narrow(1, 4, 5):contiguous()))
    -- and as the other operand of additions
    local ct = value("ciphertext")
    local sum = e:add_plaintext(ct, pt)
    assert.is_true(fh.max_abs_diff(e:decrypt_message(sum, value("secret_key"), { is_real = true }), MESSAGE * 2) < 1e-6)
  end)

  it("refuses what has no exact form and malformed ones, naming the field", function()
    local e = E()
    local ctx = e.context
    local approx = value("decrypted")
    H.expect_error("StateError", { "encode", "approximate_coefficients", "no exact RNS form" }, e.encode_plaintext, e,
      approx)
    H.expect_error("StateError", "approximate_coefficients", e.encrypt, e, approx, value("public_key"))
    H.expect_error("StateError", { "multiply_plaintext", "representation of pt is integer_coefficients" },
      e.multiply_plaintext, e, e:coefficient_domain_to_ntt_domain(value("ciphertext")), value("plaintext"))
    local slots = fh.Plaintext { message = fh.tensor({ 1 }, { dtype = "float64" }), scale = 2 }
    H.expect_error("StateError", { "decode", "slots, expected rns, integer_coefficients or approximate_coefficients" },
      e._decode, e, slots, false)
    local ints = value("plaintext").data
    H.expect_error("ValueError", { "integer_coefficients", "data must be an int64 tensor, got float64" }, fh.Plaintext,
      { data = ints:to("float64"), context = ctx, representation = "integer_coefficients" })
    H.expect_error("ValueError", { "approximate_coefficients", "data must be a float64 tensor, got int64" }, fh.Plaintext,
      { data = ints, context = ctx, representation = "approximate_coefficients" })
    H.expect_error("StateError", { "integer_coefficients", "8192 coefficients", "ring_degree is 16384" }, fh.Plaintext,
      { data = ints:narrow(1, 1, 8192), context = ctx, representation = "integer_coefficients" })
    H.expect_error("ValueError", { "integer_coefficients", "0%-dim" }, fh.Plaintext,
      { data = fh.tensor(3, { dtype = "int64" }), context = ctx, representation = "integer_coefficients" })
    H.expect_error("ValueError", { "integer_coefficients", "extents must be >= 1" }, fh.Plaintext,
      { data = fh.zeros({ 0, N }, { dtype = "int64" }), context = ctx, representation = "integer_coefficients" })
    H.expect_error("ValueError", "a CKKS context is required", fh.Plaintext,
      { data = ints, representation = "integer_coefficients", scale = 2 })
    H.expect_error("ValueError", "Plaintext %(integer_coefficients%) has no metadata field 'prime_ids'", fh.Plaintext,
      { data = ints, context = ctx, representation = "integer_coefficients", prime_ids = { 0 } })
    H.expect_error("ValueError", { "representation must be one of", "approximate_coefficients", "dense" }, fh.Plaintext,
      { data = ints, context = ctx, representation = "dense" })
  end)
end)
