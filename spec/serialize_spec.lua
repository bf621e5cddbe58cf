-- Value files: safetensors with fhelium envelopes; save/load, serialize/
-- deserialize, atomic writes, secret keys, hostile input.
local fh = require "fhelium"
local ex = require "fhelium.execution"
local H = require "spec.helpers"
local T = require "spec.fixtures.small_context"

local ctx = T.context()
local N = ctx.ring_degree

local seed = H.seed("serialize")
math.randomseed(seed)

local function rand_u64(shape)
  local n = 1
  for _, s in ipairs(shape) do n = n * s end
  local flat = {}
  for i = 1, n do flat[i] = math.random(0, 2 ^ 31 - 1) end
  return fh.tensor(flat, { dtype = "uint64" }):view(shape)
end

local function tmpdir()
  local d = os.tmpname()
  os.remove(d)
  assert(os.execute("mkdir -p " .. d) == 0 or true)
  return d
end

local function ls(dir)
  local p = io.popen("ls -A " .. dir)
  local r = {}
  for line in p:lines() do r[#r + 1] = line end
  p:close()
  table.sort(r)
  return r
end

local function le64(n)
  local s = {}
  for i = 0, 7 do s[#s + 1] = string.char(math.floor(n / 2 ^ (8 * i)) % 256) end
  return table.concat(s)
end

-- a safetensors blob from a header string and data bytes
local function blob(header, data) return le64(#header) .. header .. (data or "") end

-- header and data of a blob
local function split(bytes)
  local n = 0
  for i = 8, 1, -1 do n = n * 256 + bytes:byte(i) end
  return bytes:sub(9, 8 + n), bytes:sub(9 + n)
end

-- the blob with fn applied to its header
local function rewrite(bytes, fn)
  local h, d = split(bytes)
  local h2 = fn(h)
  assert(h2 ~= h, "rewrite did not change the header")
  return blob(h2, d)
end

-- JSON-escaped form of `s` as it appears inside a __metadata__ string
local function esc(s) return (s:gsub("\\", "\\\\"):gsub('"', '\\"')) end

local function all_values()
  return {
    ciphertext = fh.Ciphertext { data = rand_u64 { 2, 3, N }, context = ctx },
    ciphertext3 = fh.Ciphertext { data = rand_u64 { 3, 2, 2, N }, context = ctx, level = 1, scale = 1234.5678,
      polynomial_domain = "ntt", modulus_basis = "Q" },
    ciphertext_qp = fh.Ciphertext { data = rand_u64 { 2, 4, N }, context = ctx, modulus_basis = "QP" },
    plaintext_slots = fh.Plaintext { message = fh.randn({ 2, 8 }, { dtype = "float64" }), scale = 2 ^ 30 },
    plaintext_scalar = fh.Plaintext { message = 0.1, scale = 3 },
    plaintext_complex = fh.Plaintext { message = fh.tensor({ { 1, -2 }, { 0.5, 3 } }, { dtype = "complex128" }),
      context = ctx, level = 1 },
    plaintext_rns = fh.Plaintext { data = rand_u64 { 3, N }, context = ctx, residue_representation = "montgomery" },
    secret_key = fh.SecretKey { data = rand_u64 { 4, N }, context = ctx },
    public_key = fh.PublicKey { data = rand_u64 { 2, 4, N }, context = ctx, polynomial_domain = "ntt" },
    key_switch_key = fh.KeySwitchKey { data = rand_u64 { 2, 2, 4, N }, context = ctx, polynomial_domain = "ntt" },
    relinearization_key = fh.RelinearizationKey { data = rand_u64 { 3, 2, 4, N }, context = ctx, polynomial_domain = "ntt" },
    rotation_key = fh.RotationKey { data = rand_u64 { 1, 2, 4, N }, context = ctx, step = -3, polynomial_domain = "ntt" },
    conjugation_key = fh.ConjugationKey { data = rand_u64 { 1, 2, 4, N }, context = ctx, polynomial_domain = "ntt" },
  }
end

describe("value files", function()
  local dir
  before_each(function() dir = tmpdir() end)
  after_each(function() os.execute("rm -rf " .. dir) end)

  describe("round trips on the CPU", function()
    for name, v in pairs(all_values()) do
      it("saves and loads a " .. name .. " unchanged", function()
        local path = dir .. "/" .. name .. ".safetensors"
        fh.save(v, path, { allow_secret = true })
        local back = fh.load(path)
        assert.is_true(fh.is_value(back))
        assert.is_true(back:equal(v))
        assert.equal(tostring(v), tostring(back))
        local b2 = fh.deserialize(fh.serialize(v, { allow_secret = true }))
        assert.is_true(b2:equal(v))
        if v.context then assert.is_true(back.context == v.context) end
      end)
    end

    it("round-trips tensors of every dtype, strided views and requires_grad", function()
      local tree = {
        b = fh.tensor({ true, false, true }),
        u8 = fh.tensor({ 0, 255 }, { dtype = "uint8" }),
        i32 = fh.tensor({ -5, 7 }, { dtype = "int32" }),
        i64 = fh.tensor({ -9007199254740993LL, 3LL }),
        u32 = fh.tensor({ 4294967295 }, { dtype = "uint32" }),
        u64 = fh.tensor({ 18446744073709551615ULL, 0ULL }),
        f32 = fh.randn({ 3, 2 }, { requires_grad = true }),
        f64 = fh.tensor({ 1 / 3, -0.0, math.huge, -math.huge }, { dtype = "float64" }),
        c128 = fh.tensor({ { 1, 2 }, { -3, 0.25 } }, { dtype = "complex128" }),
        view = fh.arange(12, { dtype = "float64" }):view({ 3, 4 }):transpose(1, 2),
        scalar = fh.full({}, 7, { dtype = "int64" }),
        empty = fh.zeros({ 0, 3 }),
      }
      local back = fh.deserialize(fh.serialize(tree))
      for k, t in pairs(tree) do
        assert.equal(t.dtype, back[k].dtype, k)
        assert.same(t.shape, back[k].shape, k)
        assert.is_true(fh.equal(t, back[k]), k)
        assert.equal(t.requires_grad, back[k].requires_grad, k)
        assert.is_true(back[k]:is_contiguous(), k)
      end
      assert.same({ 1, 4 }, tree.view:stride())
      assert.same({ 3, 1 }, back.view:stride())
    end)

    it("round-trips trees of values: lists, tuples, dicts, nesting, empty containers", function()
      local v = all_values()
      local tree = {
        values = { v.ciphertext, v.ciphertext3 },
        keys = ex.tuple(v.public_key, v.rotation_key),
        nested = { deeper = { { v.plaintext_slots }, {} }, ["odd key \"\n\0"] = fh.ones(2) },
        w = fh.ones({ 2, 2 }),
      }
      local path = dir .. "/tree.safetensors"
      fh.save(tree, path)
      local back = fh.load(path)
      assert.is_true(back.values[1]:equal(v.ciphertext))
      assert.is_true(back.values[2]:equal(v.ciphertext3))
      assert.is_true(ex.is_tuple(back.keys))
      assert.equal(2, #back.keys)
      assert.is_true(back.keys[2]:equal(v.rotation_key))
      assert.is_true(back.nested.deeper[1][1]:equal(v.plaintext_slots))
      assert.same({}, back.nested.deeper[2])
      assert.is_true(fh.equal(back.nested["odd key \"\n\0"], fh.ones(2)))
      assert.is_true(fh.equal(back.w, tree.w))
      assert.is_true(ex.ValueTreeSignature.from_value(back) ==
        ex.ValueTreeSignature.from_value(tree))
      -- a bare tensor and an empty list as roots
      assert.is_true(fh.equal(fh.deserialize(fh.serialize(fh.ones(3))), fh.ones(3)))
      assert.same({}, fh.deserialize(fh.serialize({})))
    end)

    it("rebuilds the context from the file when no live context has its id", function()
      local c = T.context { skip = 5 }
      local id = c.id
      local path = dir .. "/ctx.safetensors"
      fh.save(fh.Ciphertext { data = rand_u64 { 2, 3, N }, context = c, level = 1, data = rand_u64 { 2, 2, N } }, path)
      c = nil
      collectgarbage()
      collectgarbage()
      H.expect_error("ValueError", "unknown context_id", fh.context_lookup, id)
      local back = fh.load(path)
      assert.equal(id, back.context_id)
      assert.equal(id, back.context.id)
      assert.equal(1, back.level)
    end)

    it("loads a plain safetensors file as a dict of its tensors", function()
      local data = string.rep("\0", 8) .. "\1\0\0\0\2\0\0\0"
      local bytes = blob('{"b":{"dtype":"I32","shape":[2],"data_offsets":[8,16]},' ..
        '"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"__metadata__":{"format":"pt"}}', data)
      local t = fh.deserialize(bytes)
      assert.same({ 0, 0 }, t.a:tolist())
      assert.same({ 1, 2 }, t.b:tolist())
    end)

    it("writes atomically with mode 0600, refusing to replace unless overwrite=true", function()
      local path = dir .. "/x.safetensors"
      fh.save(fh.ones(2), path)
      local p = io.popen("stat -c %a " .. path)
      local mode = p:read("*l")
      p:close()
      assert.equal("600", mode)
      H.expect_error("ValueError", "exists %(pass overwrite=true to replace it%)", fh.save, fh.zeros(3), path)
      assert.is_true(fh.equal(fh.load(path), fh.ones(2))) -- untouched
      fh.save(fh.zeros(3), path, { overwrite = true })
      assert.is_true(fh.equal(fh.load(path), fh.zeros(3)))
      assert.same({ "x.safetensors" }, ls(dir)) -- no temporary files left behind
      H.expect_error("IOError", "cannot create a temporary file next to", fh.save, fh.ones(1), dir .. "/no/such/dir/f")
      assert.same({ "x.safetensors" }, ls(dir))
    end)

    it("refuses secret keys unless allow_secret=true, naming where they are", function()
      local sk = all_values().secret_key
      local path = dir .. "/sk.safetensors"
      H.expect_error("ValueError", "refusing to save a SecretKey at value without allow_secret=true", fh.save, sk, path)
      H.expect_error("ValueError", "refusing to save a SecretKey at value%[\"keys\"%]%[2%]", fh.save,
        { keys = { fh.ones(1), sk } }, path)
      H.expect_error("ValueError", "refusing to save a SecretKey", fh.serialize, { sk })
      assert.same({}, ls(dir))
      fh.save(sk, path, { allow_secret = true })
      assert.is_true(fh.load(path):equal(sk))
    end)

    it("rejects bad arguments", function()
      H.expect_error("TypeError", "argument 2 %(path%) expected a string", fh.save, fh.ones(1), 5)
      H.expect_error("TypeError", "fh.save: argument 1 %(value%) is missing", fh.save, nil, dir .. "/a")
      H.expect_error("TypeError", "fh.serialize: argument 1 %(value%) is missing", fh.serialize)
      H.expect_error("ValueError", "unknown option 'overwrite'", fh.serialize, fh.ones(1), { overwrite = true })
      H.expect_error("ValueError", "unknown option 'force'", fh.save, fh.ones(1), dir .. "/a", { force = true })
      H.expect_error("TypeError", "option 'overwrite' expected a boolean", fh.save, fh.ones(1), dir .. "/a", { overwrite = 1 })
      H.expect_error("TypeError", "unsupported leaf: a number", fh.save, { 1 }, dir .. "/a")
      H.expect_error("TypeError", "argument 1 %(path%) expected a string", fh.load, 1)
      H.expect_error("IOError", "fh.load: cannot open '.*no%-such%-file': No such file or directory", fh.load, dir .. "/no-such-file")
      H.expect_error("IOError", "fh.load: cannot read '.*': Is a directory", fh.load, dir)
      H.expect_error("ValueError", "unknown option 'dev'", fh.load, dir .. "/a", { dev = "cpu" })
      H.expect_error("TypeError", "argument 1 %(bytes%) expected a string", fh.deserialize, {})
      if not H.has_gpu then
        fh.save(fh.ones(1), dir .. "/one")
        H.expect_error("CudaError", "", fh.load, dir .. "/one", { device = "cuda" })
      end
    end)
  end)

  H.gpu_it("round-trips CUDA values and loads onto a CUDA device", function()
    local v = all_values()
    local tree = { v.ciphertext:to("cuda"), v.plaintext_slots:to("cuda"), v.rotation_key:to("cuda") }
    local path = dir .. "/gpu.safetensors"
    fh.save(tree, path)
    local cpu = fh.load(path)
    assert.equal("cpu", cpu[1].device)
    assert.is_true(cpu[1]:equal(v.ciphertext))
    local gpu = fh.load(path, { device = "cuda" })
    assert.equal("cuda:0", gpu[1].device)
    assert.is_true(gpu[1]:equal(v.ciphertext))
    assert.is_true(gpu[3]:equal(v.rotation_key))
    local b = fh.deserialize(fh.serialize(tree), { device = "cuda:0" })
    assert.is_true(b[2]:equal(v.plaintext_slots))
  end)

  describe("Python's safetensors package", function()
    local function python_has_safetensors()
      local p = io.popen("python3 -c 'import safetensors.numpy, numpy' 2>&1 && echo OK")
      local out = p:read("*a")
      p:close()
      return out:find("OK") ~= nil
    end
    local available = python_has_safetensors()

    it("reads fhelium files and fhelium reads its files", function()
      if not available then
        return pending("python3 with the safetensors and numpy packages is not available (pip install safetensors numpy)")
      end
      local v = all_values()
      local path = dir .. "/py.safetensors"
      fh.save({ ct = v.ciphertext, pt = v.plaintext_complex, w = fh.arange(6, { dtype = "float32" }):view({ 2, 3 }) }, path)
      local script = dir .. "/check.py"
      local f = assert(io.open(script, "w"))
      f:write(([==[
import json, sys, numpy as np
from safetensors import safe_open
from safetensors.numpy import load_file, save_file
d = load_file(%q)
with safe_open(%q, "np") as fo:
    meta = fo.metadata()
assert meta["format"] == "fhelium", meta
tree = json.loads(meta["fhelium.tree"])
assert tree["kind"] == "dict" and tree["keys"] == ["ct", "pt", "w"], tree
print("names", ",".join(sorted(d)))
print("ct", d['["ct"].data'].dtype, list(d['["ct"].data'].shape), int(d['["ct"].data'][1, 2, 3]))
print("pt", d['["pt"].message'].dtype, list(d['["pt"].message'].shape))
print("w", d['["w"]'].tolist())
save_file({"x": np.arange(4, dtype=np.float64), "y": np.array([[1, 2]], dtype=np.uint64)}, %q, metadata={"k": "v"})
]==]):format(path, path, dir .. "/from_py.safetensors"))
      f:close()
      local p = io.popen("python3 " .. script .. " 2>&1")
      local out = p:read("*a")
      p:close()
      assert.matches('names %["ct"%]%.data,%["pt"%]%.message,%["w"%]', out)
      assert.matches("ct uint64 %[2, 3, 16%] " .. tostring(v.ciphertext.data:select(1, 2):select(1, 3):select(1, 4):item()):gsub("ULL", ""), out)
      assert.matches("pt float64 %[2, 2%]", out) -- two complex128 slots as (re, im) pairs
      assert.matches("w %[%[0%.0, 1%.0, 2%.0%], %[3%.0, 4%.0, 5%.0%]%]", out)
      local back = fh.load(dir .. "/from_py.safetensors")
      assert.same({ 0, 1, 2, 3 }, back.x:tolist())
      assert.equal("uint64", back.y.dtype)
      assert.equal(2ULL, back.y:tolist()[1][2])
    end)
  end)

  describe("corrupt, truncated and hostile input", function()
    local good = fh.serialize({ a = fh.Ciphertext { data = rand_u64 { 2, 3, N }, context = ctx }, b = fh.ones(2) })
    local function bad(kind, pattern, bytes)
      H.expect_error(kind, pattern, fh.deserialize, bytes)
      local path = dir .. "/bad.safetensors"
      local f = assert(io.open(path, "wb"))
      f:write(bytes)
      f:close()
      local err = H.expect_error(kind, pattern, fh.load, path)
      os.remove(path)
      return err
    end
    local t1 = '{"t":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}'

    it("rejects truncated input", function()
      bad("ValueError", "truncated safetensors data: 0 bytes", "")
      bad("ValueError", "truncated safetensors data: 5 bytes", "\2\0\0\0\0")
      bad("ValueError", "the header needs " .. #t1 .. " bytes but only 10 follow", le64(#t1) .. t1:sub(1, 10))
      bad("ValueError", "truncated safetensors data: the tensors need 8 data bytes but only 4 are present", blob(t1, "\0\0\0\0"))
      bad("ValueError", "truncated", good:sub(1, #good - 1))
      for _, cut in ipairs { 9, 100, 400 } do bad("ValueError", "", good:sub(1, cut)) end
    end)

    it("rejects a huge or tiny header length before reading it", function()
      bad("ValueError", "header length 1099511627776 exceeds the limit of 100000000 bytes", le64(2 ^ 40) .. "{}")
      bad("ValueError", "header length 1 is too small", le64(1) .. "{")
      bad("ValueError", "header length 100000001 exceeds", le64(100000001) .. "{}")
    end)

    it("rejects bad JSON and non-object headers", function()
      bad("ValueError", "invalid JSON", blob("{not json}"))
      bad("ValueError", "invalid JSON", blob('{"a":1,"a":2}')) -- duplicate keys
      bad("ValueError", "the header is not a JSON object", blob("[1, 2]"))
      bad("ValueError", "invalid JSON", blob('{"t":"\\u0000"}'))
    end)

    it("reads the header's JSON as strictly as Jansson (RFC 8259, duplicate keys refused), and refuses the NUL byte Jansson skips", function()
      local e8 = '{"dtype":"U8","shape":[1],"data_offsets":[0,1]}'
      -- valid: whitespace anywhere, escapes, UTF-8, any key order, metadata anywhere
      local ok = {
        [' \t\r\n{ "a" : ' .. e8 .. ' } \n  '] = "a",
        ['{"\\u00e9\\ud83d\\ude00\\/\\"\\\\\\b\\f\\n\\r\\t":' .. e8 .. '}'] = "é😀/\"\\\b\f\n\r\t",
        ['{"é😀":' .. e8 .. '}'] = "é😀",
        ['{"a":{"data_offsets":[0,1],"shape":[1],"dtype":"U8"}}'] = "a",
        ['{"a":' .. e8 .. ',"__metadata__":{"k":"v\\u20ac","":""}}'] = "a",
        ['{"a":{"dtype":"U8","shape":[-0],"data_offsets":[0,0]},"b":' .. e8 .. '}'] = "b",
      }
      for header, name in pairs(ok) do
        local d = fh.deserialize(blob(header, "\7"))
        assert.equal(7, d[name]:item(), header)
      end
      assert.same({}, fh.deserialize(blob("{}")))
      assert.same({}, fh.deserialize(blob('{"__metadata__":{}}')))
      -- invalid JSON, wherever it is (a schema error earlier in the text does not hide it)
      local invalid = {
        '{"a":' .. e8 .. ',}', '{"a" ' .. e8 .. '}', "{'a':" .. e8 .. "}", '{"a":' .. e8 .. '} x', '{"a":' .. e8 .. '}}',
        '{"a":{"dtype":"U8","shape":[01],"data_offsets":[0,1]}}', '{"a":{"dtype":"U8","shape":[1.],"data_offsets":[0,1]}}',
        '{"a":{"dtype":"U8","shape":[+1],"data_offsets":[0,1]}}', '{"a":{"dtype":"U8","shape":[NaN],"data_offsets":[0,1]}}',
        '{"a":{"dtype":"U8","shape":[9223372036854775808],"data_offsets":[0,1]}}',
        '{"\\ud83d":' .. e8 .. '}', '{"\\ude00":' .. e8 .. '}', '{"\\u00":' .. e8 .. '}', '{"\\x":' .. e8 .. '}',
        '{"a\\u0000":' .. e8 .. '}', '{"a\0":' .. e8 .. '}', '{"a\1":' .. e8 .. '}', '{"\255":' .. e8 .. '}',
        '{"\192\175":' .. e8 .. '}', '{"\237\160\128":' .. e8 .. '}', '{"\244\144\128\128":' .. e8 .. '}',
        '{"a":' .. e8 .. ',"a":' .. e8 .. '}', '{"__metadata__":{"k":"v","k":"w"}}',
        '{"__metadata__":{},"__metadata__":{}}', '{"a":{"dtype":"U8","dtype":"U8","shape":[1],"data_offsets":[0,1]}}',
        '{"a":5,"b":' .. e8 .. ',}', '{"a":{"x":' .. string.rep("[", 3000) .. string.rep("]", 3000) .. '}}',
        "5", '"a"', "true", "", "   ", '{"a":tru}', '{"a":' .. e8 .. '\0}',
      }
      -- a NUL byte right after a number: Jansson drops it (it read this
      -- header as valid); RFC 8259 does not allow it
      invalid[#invalid + 1] = '{"a":{"dtype":"U8","shape":[1\0],"data_offsets":[0,1]}}'
      for _, header in ipairs(invalid) do
        if #header < 2 then header = header .. "  " end
        H.expect_error("ValueError", "corrupt safetensors header: invalid JSON", fh.deserialize, blob(header, "\7"))
      end
      -- valid JSON that is no header
      bad("ValueError", "the header is not a JSON object", blob(" [1, {}, []] "))
      bad("ValueError", "entry 'a' must have exactly the keys", blob('{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1],"x":[[[{}]]]}}', "\7"))
      bad("ValueError", "__metadata__ value of 'k' is not a string", blob('{"__metadata__":{"k":["v"]}}'))
    end)

    it("rejects malformed tensor entries", function()
      bad("ValueError", "entry 't' is not an object", blob('{"t":5}'))
      bad("ValueError", "must have exactly the keys dtype, shape and data_offsets",
        blob('{"t":{"dtype":"F32","shape":[2]}}', string.rep("\0", 8)))
      bad("ValueError", "must have exactly the keys", blob('{"t":{"dtype":"F32","shape":[2],"data_offsets":[0,8],"x":1}}', string.rep("\0", 8)))
      bad("ValueError", "unsupported dtype 'F16'", blob('{"t":{"dtype":"F16","shape":[2],"data_offsets":[0,4]}}', "\0\0\0\0"))
      bad("ValueError", "unsupported dtype 'complex'", blob('{"t":{"dtype":"complex","shape":[1],"data_offsets":[0,16]}}', string.rep("\0", 16)))
      bad("ValueError", "dtype is not a string", blob('{"t":{"dtype":4,"shape":[2],"data_offsets":[0,8]}}', string.rep("\0", 8)))
      bad("ValueError", "shape%[1%] is not a non%-negative integer", blob('{"t":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}}', string.rep("\0", 8)))
      bad("ValueError", "shape%[2%] is not a non%-negative integer", blob('{"t":{"dtype":"F32","shape":[2,1.5],"data_offsets":[0,8]}}', string.rep("\0", 8)))
      bad("ValueError", "shape overflows", blob('{"t":{"dtype":"F64","shape":[4294967296,4294967296,16],"data_offsets":[0,8]}}', string.rep("\0", 8)))
      bad("ValueError", "shape overflows", blob('{"t":{"dtype":"F64","shape":[2305843009213693952],"data_offsets":[0,8]}}', string.rep("\0", 8)))
      bad("ValueError", "18 dimensions %(at most 17%)", blob('{"t":{"dtype":"U8","shape":[1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1],"data_offsets":[0,1]}}', "\0"))
      bad("ValueError", "data_offsets span 8 bytes but dtype F64 and the shape need 16",
        blob('{"t":{"dtype":"F64","shape":[2],"data_offsets":[0,8]}}', string.rep("\0", 8)))
      bad("ValueError", "data_offsets end before they begin", blob('{"t":{"dtype":"F32","shape":[0],"data_offsets":[8,0]}}', string.rep("\0", 8)))
      bad("ValueError", "data_offsets must be non%-negative integers", blob('{"t":{"dtype":"F32","shape":[2],"data_offsets":[-8,0]}}', string.rep("\0", 8)))
      bad("ValueError", "data_offsets is not %[begin, end%]", blob('{"t":{"dtype":"F32","shape":[2],"data_offsets":[0]}}', string.rep("\0", 8)))
      bad("ValueError", "invalid JSON", blob('{"t":{"dtype":"F32","shape":[2],"data_offsets":[0,99999999999999999999]}}', string.rep("\0", 8)))
      bad("ValueError", "empty tensor name", blob('{"":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}', string.rep("\0", 8)))
    end)

    it("rejects offsets out of range, overlapping tensors, gaps and trailing bytes", function()
      bad("ValueError", "the tensors need 1008 data bytes but only 8", blob('{"t":{"dtype":"F32","shape":[2],"data_offsets":[1000,1008]},' ..
        '"u":{"dtype":"U8","shape":[1000],"data_offsets":[0,1000]}}', string.rep("\0", 8)))
      bad("ValueError", "tensors 'a' and 'b' overlap", blob('{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},' ..
        '"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}}', string.rep("\0", 12)))
      bad("ValueError", "4 bytes before tensor 'b' belong to no tensor", blob('{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},' ..
        '"b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}}', string.rep("\0", 12)))
      bad("ValueError", "3 trailing bytes belong to no tensor", blob(t1, string.rep("\0", 11)))
    end)

    it("rejects bad __metadata__", function()
      bad("ValueError", "__metadata__ is not an object", blob('{"__metadata__":[]}'))
      bad("ValueError", "__metadata__ value of 'k' is not a string", blob('{"__metadata__":{"k":1}}'))
      bad("ValueError", "unsupported value file: fhelium.schema_version is \"2\"",
        rewrite(good, function(h) return h:gsub('"fhelium.schema_version":"1"', '"fhelium.schema_version":"2"') end))
      bad("ValueError", "fhelium.schema_version is missing",
        rewrite(good, function(h) return h:gsub('"fhelium.schema_version":"1",', '') end))
      bad("ValueError", "__metadata__ has no fhelium.tree",
        blob('{"__metadata__":{"format":"fhelium","fhelium.schema_version":"1"}}'))
      bad("ValueError", "fhelium.tree is not valid JSON",
        rewrite(good, function(h) return h:gsub('"fhelium.tree":"{', '"fhelium.tree":"{{') end))
      bad("ValueError", "fhelium.contexts is not a JSON object",
        rewrite(good, function(h) return h:gsub('"fhelium.contexts":"{', '"fhelium.contexts":"[') end))
    end)

    it("rejects bad value trees, naming the path", function()
      local function tree_bad(kind, pattern, from, to)
        local bytes = rewrite(good, function(h)
          local r, n = h:gsub(esc(from):gsub("%p", "%%%0"), (esc(to):gsub("%%", "%%%%")), 1)
          assert(n == 1, "pattern not found: " .. from)
          return r
        end)
        return bad(kind, pattern, bytes)
      end
      tree_bad("ValueError", "corrupt value file at value%[\"a\"%]: unknown value type 'Cyphertext'",
        '"value_type":"Ciphertext"', '"value_type":"Cyphertext"')
      tree_bad("ValueError", "at value%[\"a\"%]: unsupported value schema_version", '"schema_version":1', '"schema_version":7')
      tree_bad("ValueError", "Ciphertext: metadata field 'level' must be an integer", '"level":0', '"level":"0"')
      tree_bad("ValueError", "Ciphertext: metadata field 'level' is missing", '"level":0,', '')
      tree_bad("ValueError", "Ciphertext: unknown metadata field 'depth'", '"level":0', '"level":0,"depth":1')
      tree_bad("ValueError", "metadata field 'prime_ids' must list 32%-bit integers", '"prime_ids":[0,1,2]', '"prime_ids":[0,1,"2"]')
      tree_bad("StateError", "corrupt value file at value%[\"a\"%]: Ciphertext: prime_ids {0,2,1} are not the active rows",
        '"prime_ids":[0,1,2]', '"prime_ids":[0,2,1]')
      tree_bad("StateError", "polynomial_domain \"ntt\" requires residue_representation \"montgomery\"",
        '"polynomial_domain":"coefficient"', '"polynomial_domain":"ntt"')
      tree_bad("ValueError", "metadata field 'scale' has an unsupported JSON type", '"scale":1048576.0', '"scale":null')
      tree_bad("ValueError", "at value%[\"b\"%]: tensor '%[\"x\"%]' is not in the file", '"tensor":"[\\"b\\"]"', '"tensor":"[\\"x\\"]"')
      tree_bad("ValueError", "at value%[\"b\"%]: tensor '%[\"a\"%]%.data' is used twice", '"tensor":"[\\"b\\"]"', '"tensor":"[\\"a\\"].data"')
      tree_bad("ValueError", "tensor '%[\"b\"%]' is stored as F32 but recorded as float64", '"dtype":"float32"', '"dtype":"float64"')
      tree_bad("ValueError", "unknown dtype 'float16'", '"dtype":"float32"', '"dtype":"float16"')
      tree_bad("ValueError", "unknown tree node kind 'set'", '"kind":"dict"', '"kind":"set"')
      tree_bad("ValueError", "dict keys are not sorted and unique", '"keys":["a","b"]', '"keys":["b","a"]')
      tree_bad("ValueError", "dict node needs as many keys as items", '"keys":["a","b"]', '"keys":["a"]')
      tree_bad("ValueError", "value node has unknown keys", '"value_type":"Ciphertext"', '"value_type":"Ciphertext","x":1')
      tree_bad("ValueError", "context_id '0+' is neither in the file nor live", '"context_id":"' .. ctx.id .. '"',
        '"context_id":"' .. string.rep("0", 64) .. '"')
      tree_bad("ValueError", "context parameters do not hash to their id",
        '"default_scale":1048576.0', '"default_scale":1048577.0')
      tree_bad("ValueError", "context '.*': q_primes%[2%] = 33 is not prime", ',' .. tostring(ctx.q_primes[2]):gsub("ULL", "") .. ',', ',33,')
      -- an unreferenced tensor
      local h, d = split(good)
      local extra = h:gsub('^{', '{"zz":{"dtype":"U8","shape":[1],"data_offsets":[' .. #d .. ',' .. (#d + 1) .. ']},')
      bad("ValueError", "tensor 'zz' is not part of the value tree", blob(extra, d .. "\0"))
      -- a tree nested deeper than 64 levels
      local deep = {}
      local node = deep
      for _ = 1, 63 do node[1] = {} node = node[1] end
      node[1] = fh.ones(1)
      local deep_bytes = fh.serialize(deep)
      local nested = rewrite(deep_bytes, function(hh)
        return hh:gsub('{\\"kind\\":\\"list\\",\\"items\\":%[', '{\\"kind\\":\\"list\\",\\"items\\":[{\\"kind\\":\\"list\\",\\"items\\":[', 1)
          :gsub('}%]}"', '}]}]}"', 1)
      end)
      bad("ValueError", "tree nesting deeper than 64 levels", nested)
    end)

    it("never crashes on random corruption (bit flips and cuts)", function()
      local loaded, failed = 0, 0
      for i = 1, 400 do
        local b = { good:byte(1, -1) }
        for _ = 1, math.random(1, 4) do
          local pos = math.random(1, #b)
          b[pos] = math.random(0, 255)
        end
        local s = string.char(unpack(b))
        if i % 5 == 0 then s = s:sub(1, math.random(0, #s)) end
        local ok, err = pcall(fh.deserialize, s)
        if ok then loaded = loaded + 1 else
          assert.is_true(fh.errors.is(err, "FHEliumError"), tostring(err))
          failed = failed + 1
        end
      end
      assert.is_true(failed > 0)
      io.stderr:write(("[corruption: %d loaded, %d rejected]\n"):format(loaded, failed))
    end)
  end)
end)
