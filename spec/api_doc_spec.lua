-- docs/api.md is the API contract and must stay in step with the code: every
-- public function, method, field, option and error kind the library exposes
-- is named there. Public means: not starting with "_". Options are read from
-- the functions themselves (an unknown option's ValueError lists the
-- accepted ones).
local fh = require "fhelium"
local cli = require "spec.support.cli"
local ex = require "fhelium.execution"

local f = assert(io.open(cli.root .. "/docs/api.md"))
local doc = f:read("*a")
f:close()

local function documented(name)
  return doc:find("%f[%w_]" .. name:gsub("%p", "%%%0") .. "%f[^%w_]") ~= nil
end

local function public_keys(t)
  local r = {}
  for k in pairs(t) do
    if type(k) == "string" and k:sub(1, 1) ~= "_" then r[#r + 1] = k end
  end
  table.sort(r)
  return r
end

local function check_all(what, names)
  local missing = {}
  for _, n in ipairs(names) do
    if not documented(n) then missing[#missing + 1] = n end
  end
  assert(#missing == 0, ("docs/api.md does not name %s: %s"):format(what, table.concat(missing, ", ")))
end

describe("docs/api.md", function()
  it("names every function of fh, fh.cuda, fh.rns, fh.errors, fh.pretty, fhelium.execution and fhelium.testing",
    function()
    check_all("fh fields", public_keys(fh))
    check_all("fh.cuda functions", public_keys(fh.cuda))
    check_all("fh.rns functions", public_keys(fh.rns))
    check_all("fh.errors fields", public_keys(fh.errors))
    check_all("fh.pretty fields", public_keys(fh.pretty))
    check_all("fhelium.execution fields", public_keys(ex))
    check_all("fh.info() fields", public_keys(fh.info()))
    check_all("fhelium.testing fields", public_keys(require "fhelium.testing"))
    check_all("fh.distributed functions and fields", public_keys(fh.distributed))
    check_all("fh.distributed fields", getmetatable(fh.distributed).fields)
    check_all("fh.distributed.info() fields", public_keys(fh.distributed.info()))
  end)

  it("names every error kind", function()
    check_all("error kinds", fh.errors.kinds)
  end)

  it("names every method and field of every class", function()
    local core = fh.core
    local e = fh.CkksEngine({ log_n = 10, q_bits = { 40, 40, 60 }, p_bits = { 60 }, allow_insecure = true })
    local classes = {
      Tensor = core.Tensor_metatable, ReusableValueBuffer = core.ReusableValueBuffer_metatable,
      CopyHandle = core.CopyHandle_metatable, Program = core.Program_metatable,
      Signature = core.Signature_metatable, Value = core.Value_metatable,
      CkksContext = core.CkksContext_metatable, CkksEngine = getmetatable(e),
    }
    for name, mt in pairs(classes) do
      check_all(name .. " methods", public_keys(mt.methods))
      check_all(name .. " fields", mt.fields or {})
    end
    check_all("Generator methods", public_keys(getmetatable(fh.Generator(1)).__index))
  end)

  it("names every option of the functions that take options", function()
    local t = fh.zeros({ 2 })
    local e = fh.CkksEngine({ log_n = 10, q_bits = { 40, 40, 60 }, p_bits = { 60 }, allow_insecure = true },
      { seed = 1 })
    local sk = e:create_secret_key()
    local pk = e:create_public_key(sk)
    local ct = e:encrypt_message({ 1 }, pk)
    local buf = ex.ReusableValueBuffer.like({ t })
    local prog = ex.HostGraphProgram.capture(function(x) return x + 1 end, { example_inputs = { t }, warmup = 0 })
    local sig = ex.ValueTreeSignature.from_value({ t })
    local bogus = { bogus_option = 1 }
    local calls = {
      { fh.zeros, { 2 }, bogus }, { fh.rand, { 2 }, bogus }, { t.to, t, "cpu", bogus }, { t.copy_, t, t, bogus },
      { fh.add, t, t, bogus }, { fh.allclose, t, t, bogus }, { fh.cuda.Event, bogus },
      { fh.CkksEngine, "x", bogus }, { e.encode, e, { 1 }, bogus }, { e.decode, e, e:encode({ 1 }), bogus },
      { fh.save, t, "/nonexistent/x", bogus }, { fh.load, "/nonexistent/x", bogus }, { fh.serialize, t, bogus },
      { fh.deserialize, "", bogus }, { fh.from_envelope, fh.envelope(ct), bogus }, { ct.to, ct, "cpu", bogus },
      { ex.ReusableValueBuffer.like, { t }, bogus }, { buf.copy_from, buf, { t }, bogus },
      { prog.replay, prog, { t }, bogus }, { prog.replay_prepared, prog, bogus },
      { prog.copy_inputs_from, prog, { t }, bogus }, { ex.HostGraphProgram.capture, function() end, bogus },
      { sig.validate, sig, { t }, bogus },
    }
    local checked = 0
    for _, c in ipairs(calls) do
      local ok, err = pcall(c[1], unpack(c, 2, table.maxn(c)))
      assert.is_false(ok)
      local list = tostring(err.message):match("unknown option 'bogus_option' %(expected ([^)]*)%)")
      assert(list, "no option list in: " .. tostring(err))
      local names = {}
      for n in list:gmatch("[%w_]+") do names[#names + 1] = n end
      check_all("options (" .. err.message:match("^[^:]+:?[^:]*") .. ")", names)
      checked = checked + 1
    end
    assert.is_true(checked >= 20)
    buf:close()
    prog:close()
  end)
end)
