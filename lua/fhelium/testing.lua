-- fhelium.testing: what busted specs of programs built on fhelium need
-- (docs/testing.md).
--
--   local testing = require "fhelium.testing"
--
-- Loading it registers luassert assertions whose failure messages say where
-- and by how much:
--   assert.tensor_near(actual, expected, {atol=, rtol=, equal_nan=false})
--   assert.decrypts_to(engine, ct, sk, message, {atol=1e-5, rtol=0, complex=false})
--   assert.same_signature(a, b)
--   assert.raises_kind(kind, fn, needle)  --> the error object
-- and gives
--   testing.skip_it(name, reason)   testing.gpu_it(name, fn)   testing.gpus_it(n, name, fn)
--   testing.has_gpu(n)   testing.require_gpu
--   testing.seed(label)   testing.engine(preset, opts)   testing.small
--
-- Problems with the values under test (a tensor off by 0.3, a string error
-- where an error object belongs, a value tree that is not one) fail the
-- assertion; misuse of the assertion itself (an unknown option, a kind that
-- does not exist) raises an fhelium error object naming the argument.
local fh = require "fhelium"
local core = fh.core
local errors = fh.errors

local M = {}

local function raise(kind, fmt, ...)
  error(errors.new(kind, fmt:format(...)), 3)
end

local function typename(x) return core.typename(x) end

local function check_string(fname, argn, argname, x)
  if type(x) ~= "string" then
    raise("TypeError", "%s: argument %d (%s) expected a string, got %s", fname, argn, argname, typename(x))
  end
end

local function check_function(fname, argn, argname, x)
  local mt = getmetatable(x)
  if type(x) ~= "function" and not (type(mt) == "table" and mt.__call) then
    raise("TypeError", "%s: argument %d (%s) expected a function, got %s", fname, argn, argname, typename(x))
  end
end

-- opts: nil or a table whose keys are all in `allowed` (a list)
local function check_opts(fname, argn, opts, allowed)
  if opts == nil then return {} end
  if type(opts) ~= "table" or fh.is_tensor(opts) then
    raise("TypeError", "%s: argument %d (opts) expected a table, got %s", fname, argn, typename(opts))
  end
  local set = {}
  for _, k in ipairs(allowed) do set[k] = true end
  for k in pairs(opts) do
    if not set[k] then
      raise("ValueError", "%s: unknown option '%s' (expected %s)", fname, tostring(k), table.concat(allowed, ", "))
    end
  end
  return opts
end

local function check_tolerance(fname, opts, key, default)
  local v = opts[key]
  if v == nil then return default end
  if type(v) ~= "number" then
    raise("TypeError", "%s: option '%s' expected a number, got %s", fname, key, typename(v))
  end
  if not (v >= 0 and v < math.huge) then
    raise("ValueError", "%s: option '%s' expected a finite number >= 0, got %s", fname, key, tostring(v))
  end
  return v
end

local function check_boolean(fname, opts, key)
  local v = opts[key]
  if v ~= nil and type(v) ~= "boolean" then
    raise("TypeError", "%s: option '%s' expected a boolean, got %s", fname, key, typename(v))
  end
  return v == true
end

-- ---- formatting -------------------------------------------------------------

--- A number as the shortest text that reads back as the same number.
local function num(x)
  if type(x) == "cdata" then return (tostring(x):gsub("U?LL$", "")) end
  if type(x) ~= "number" then return tostring(x) end
  if x ~= x then return "nan" end
  if x == math.huge then return "inf" end
  if x == -math.huge then return "-inf" end
  for p = 6, 17 do
    local s = ("%." .. p .. "g"):format(x)
    if tonumber(s) == x then return s end
  end
  return ("%.17g"):format(x)
end


-- a float32 element as the shortest text that reads back as the same float32
local f32 = require("ffi").new("float[1]")
local function num32(x)
  if type(x) ~= "number" or x ~= x or math.abs(x) == math.huge then return num(x) end
  for p = 6, 9 do
    local s = ("%." .. p .. "g"):format(x)
    f32[0] = tonumber(s)
    if f32[0] == x then return s end
  end
  return num(x)
end

local function elem_text(x, dtype)
  if dtype == "float32" then return num32(x) end
  if type(x) == "table" then -- complex {re, im}
    local re, im = x[1], x[2]
    local sign = (im < 0 or (im == 0 and 1 / im < 0)) and "-" or "+"
    return num(re) .. sign .. num(math.abs(im)) .. "i"
  end
  return num(x)
end

local function list_text(l)
  local parts = {}
  for i = 1, #l do parts[i] = type(l[i]) == "table" and list_text(l[i]) or num(l[i]) end
  return "{" .. table.concat(parts, ",") .. "}"
end

-- ---- element-wise comparison ---------------------------------------------------

local float_dtypes = { float32 = true, float64 = true, complex128 = true }

--- Default {atol, rtol} of a dtype (torch.testing.assert_close's): float32
--- 1e-5 and 1.3e-6, float64 and complex128 1e-7 and 1e-7, every other dtype
--- exact (0 and 0).
function M.default_tolerances(dtype)
  if dtype == "float32" then return 1e-5, 1.3e-6 end
  if dtype == "float64" or dtype == "complex128" then return 1e-7, 1e-7 end
  return 0, 0
end

-- the elements of t (on the CPU) in row-major order
local function flatten(t)
  local nd = t:dim()
  local l = t:cpu():tolist()
  if nd == 0 then return { l } end
  local out = {}
  local function walk(x, d)
    if d == nd then
      out[#out + 1] = x
      return
    end
    for i = 1, #x do walk(x[i], d + 1) end
  end
  walk(l, 0)
  return out
end

local function isnan(x) return x ~= x end

local function absnum(x)
  if type(x) == "cdata" then return math.abs(tonumber(x)) end
  return math.abs(x)
end

-- |a - e| as a number (exact ints as cdata), nan when a NaN is involved
local function distance(a, e, complex)
  if complex then
    if a[1] == e[1] and a[2] == e[2] then return 0 end
    local dr, di = a[1] - e[1], a[2] - e[2]
    return math.sqrt(dr * dr + di * di)
  end
  if type(a) == "boolean" then return a == e and 0 or 1 end
  if a == e then return 0 end
  if type(a) == "cdata" or type(e) == "cdata" then
    if a > e then return tonumber(a - e) end
    return tonumber(e - a)
  end
  return math.abs(a - e)
end

local function has_nan(x, complex)
  if complex then return isnan(x[1]) or isnan(x[2]) end
  return type(x) == "number" and isnan(x)
end

local function is_inf(x, complex)
  if complex then return math.abs(x[1]) == math.huge or math.abs(x[2]) == math.huge end
  return type(x) == "number" and math.abs(x) == math.huge
end

local function magnitude(e, complex)
  if complex then return math.sqrt(e[1] * e[1] + e[2] * e[2]) end
  if type(e) == "boolean" then return 0 end
  return absnum(e)
end

--- Compares two equal-length element lists: nil when every element is
--- within atol + rtol * |expected|, else a report of the elements outside
--- it, the worst one (by how far it exceeds its allowance) first.
local function compare_elements(A, E, atol, rtol, equal_nan, complex)
  local bad, worst, worst_excess, maxdiff = 0, nil, -math.huge, 0
  for k = 1, #A do
    local a, e = A[k], E[k]
    local diff, allowed, ok
    local an, en = has_nan(a, complex), has_nan(e, complex)
    if an or en then
      ok = equal_nan and an and en
      diff, allowed = ok and 0 or 0 / 0, atol
    elseif is_inf(a, complex) or is_inf(e, complex) then
      ok = distance(a, e, complex) == 0
      diff, allowed = ok and 0 or math.huge, atol
    else
      diff = distance(a, e, complex)
      allowed = atol + rtol * magnitude(e, complex)
      ok = diff <= allowed
    end
    if diff == diff and diff > maxdiff then maxdiff = diff end
    if not ok then
      bad = bad + 1
      local excess = diff == diff and diff - allowed or math.huge
      if worst == nil or excess > worst_excess then worst, worst_excess = k, excess end
      if diff ~= diff then maxdiff = 0 / 0 end
    end
  end
  if bad == 0 then return nil, maxdiff end
  local w = worst
  return {
    bad = bad, total = #A, index = w, actual = A[w], expected = E[w],
    diff = distance(A[w], E[w], complex), maxdiff = maxdiff,
    allowed = atol + rtol * (has_nan(E[w], complex) and 0 or magnitude(E[w], complex)),
  }, maxdiff
end

local function index_text(k, shape)
  if #shape == 0 then return "[]" end
  local idx = {}
  k = k - 1
  for d = #shape, 1, -1 do
    idx[d] = k % shape[d] + 1
    k = math.floor(k / shape[d])
  end
  return "[" .. table.concat(idx, ",") .. "]"
end

local function tolerance_text(atol, rtol)
  if rtol == 0 then return "atol " .. num(atol) end
  return ("atol %s + rtol %s * |expected|"):format(num(atol), num(rtol))
end

-- ---- assert.tensor_near ---------------------------------------------------------

local function shape_of(t) return list_text(t.shape) end

local NEAR = "assert.tensor_near"

local function as_expected(actual, expected)
  if fh.is_tensor(expected) then return expected, true end
  if type(expected) == "number" or type(expected) == "cdata" then
    return fh.full(actual.shape, expected, { dtype = actual.dtype, device = actual.device }), false
  end
  if type(expected) == "table" then
    local ok, t = pcall(fh.tensor, expected, { dtype = actual.dtype })
    if ok then return t, false end
    raise("TypeError", "%s: argument 2 (expected) is not tensor data: %s", NEAR,
      errors.is_error(t) and t.message or tostring(t))
  end
  raise("TypeError", "%s: argument 2 (expected) expected a Tensor, a number or a nested list of numbers, got %s", NEAR,
    typename(expected))
end

--- The check behind assert.tensor_near: ok, message when not near, message
--- when near.
local function check_tensor_near(actual, expected, opts)
  opts = check_opts(NEAR, 3, opts, { "atol", "rtol", "equal_nan" })
  if not fh.is_tensor(actual) then
    return false, ("%s: argument 1 (actual) expected a Tensor, got %s"):format(NEAR, typename(actual)), ""
  end
  local dt_atol, dt_rtol = M.default_tolerances(actual.dtype)
  local atol = check_tolerance(NEAR, opts, "atol", dt_atol)
  local rtol = check_tolerance(NEAR, opts, "rtol", dt_rtol)
  local equal_nan = check_boolean(NEAR, opts, "equal_nan")
  local exp, given_as_tensor = as_expected(actual, expected)
  local diffs = {}
  if shape_of(actual) ~= shape_of(exp) then
    diffs[#diffs + 1] = ("shape (actual %s, expected %s)"):format(shape_of(actual), shape_of(exp))
  end
  if given_as_tensor and actual.dtype ~= exp.dtype then
    diffs[#diffs + 1] = ("dtype (actual %s, expected %s)"):format(actual.dtype, exp.dtype)
  end
  if given_as_tensor and actual.device ~= exp.device then
    diffs[#diffs + 1] = ("device (actual %s, expected %s)"):format(actual.device, exp.device)
  end
  if #diffs > 0 then
    return false, ("%s: actual and expected differ in %s"):format(NEAR, table.concat(diffs, " and ")), ""
  end
  local complex = actual.dtype == "complex128"
  local report, maxdiff = compare_elements(flatten(actual), flatten(exp), atol, rtol, equal_nan, complex)
  local n = actual:numel()
  if report then
    local hint = ""
    if has_nan(report.expected, complex) and has_nan(report.actual, complex) then
      hint = " (NaN matches NaN only with equal_nan = true)"
    end
    return false, ("%s: %d of %d element%s %s outside %s; the worst at %s: actual %s, expected %s, |diff| %s " ..
      "(allowed %s)%s"):format(NEAR, report.bad, report.total, report.total == 1 and "" or "s",
      report.bad == 1 and "is" or "are", tolerance_text(atol, rtol), index_text(report.index, actual.shape),
      elem_text(report.actual, actual.dtype), elem_text(report.expected, actual.dtype), num(report.diff),
      num(report.allowed), hint), ""
  end
  return true, "", ("%s: expected the tensors not to be near, but all %d element%s within %s (max |diff| %s)")
    :format(NEAR, n, n == 1 and " is" or "s are", tolerance_text(atol, rtol), num(maxdiff))
end

-- ---- assert.decrypts_to ---------------------------------------------------------

local DEC = "assert.decrypts_to"

local function slot_text(k, shape)
  local slots = shape[#shape]
  local slot = (k - 1) % slots + 1
  if #shape == 1 then return ("slot %d"):format(slot) end
  local batch = {}
  local b = math.floor((k - 1) / slots)
  for d = #shape - 1, 1, -1 do
    batch[d] = b % shape[d] + 1
    b = math.floor(b / shape[d])
  end
  return ("batch [%s], slot %d"):format(table.concat(batch, ","), slot)
end

--- The check behind assert.decrypts_to: ok, message when it does not
--- decrypt to `message`, message when it does.
local function check_decrypts_to(engine, ct, sk, message, opts)
  opts = check_opts(DEC, 5, opts, { "atol", "rtol", "complex" })
  if getmetatable(engine) == nil or getmetatable(engine).methods ~= core.CkksEngine_methods then
    raise("TypeError", "%s: argument 1 (engine) expected a CkksEngine, got %s", DEC, typename(engine))
  end
  local atol = check_tolerance(DEC, opts, "atol", 1e-5)
  local rtol = check_tolerance(DEC, opts, "rtol", 0)
  local complex = check_boolean(DEC, opts, "complex")
  -- the expected slots, as encode reads a message (docs/ckks.md, "Messages")
  local want
  if fh.is_tensor(message) then
    if complex then
      raise("TypeError", "%s: option complex = true applies to Lua lists, got a %s tensor for message", DEC,
        message.dtype)
    end
    if message.dtype == "complex128" then
      complex, want = true, message
    elseif message.dtype == "bool" then
      raise("TypeError", "%s: argument 4 (message) expected a number, a list or a float64/complex128 tensor, got a " ..
        "bool tensor", DEC)
    else
      want = message.dtype == "float64" and message or fh.tensor(message, { dtype = "float64" })
    end
    want = want:cpu()
  elseif type(message) == "number" then
    if complex then
      raise("TypeError", "%s: argument 4 (message) with complex = true expected a list of {re, im} pairs, got number",
        DEC)
    end
    want = fh.full({}, message, { dtype = "float64" })
  elseif type(message) == "table" then
    if #message == 0 then raise("ValueError", "%s: argument 4 (message) is an empty list", DEC) end
    local ok, t = pcall(core._message_tensor, message, complex, DEC)
    if not ok then error(t, 0) end
    want = t
  else
    raise("TypeError", "%s: argument 4 (message) expected a number, a list or a tensor, got %s", DEC, typename(message))
  end
  local ok, got = pcall(engine.decrypt_message, engine, ct, sk, { is_real = not complex })
  if not ok then
    return false, ("%s: decryption failed: %s"):format(DEC, tostring(got)), ""
  end
  got = got:cpu()
  if want:dim() == 0 then
    want = want:expand(got.shape)
  end
  local gs, ws = got.shape, want.shape
  local slots = gs[#gs]
  local batch_g, batch_w = {}, {}
  for d = 1, #gs - 1 do batch_g[d] = gs[d] end
  for d = 1, #ws - 1 do batch_w[d] = ws[d] end
  if list_text(batch_g) ~= list_text(batch_w) then
    return false, ("%s: the ciphertext holds a batch of shape %s, the message a batch of shape %s (message shape %s)")
      :format(DEC, list_text(batch_g), list_text(batch_w), list_text(ws)), ""
  end
  local n = ws[#ws]
  if n > slots then
    return false, ("%s: the message has %d slots, the ciphertext %d"):format(DEC, n, slots), ""
  end
  got = got:narrow(got:dim(), 1, n)
  local report, maxerr = compare_elements(flatten(got), flatten(want), atol, rtol, false, complex)
  local total = want:numel()
  if report then
    return false, ("%s: %d of %d slot%s %s off by more than %s; the worst, %s, decrypts to %s, expected %s " ..
      "(|error| %s)"):format(DEC, report.bad, report.total, report.total == 1 and "" or "s",
        report.bad == 1 and "is" or "are", tolerance_text(atol, rtol),
        slot_text(report.index, want.shape), elem_text(report.actual), elem_text(report.expected),
        num(report.diff)), ""
  end
  return true, "", ("%s: expected a different decryption, but all %d slot%s within %s of the message (max " ..
    "|error| %s)"):format(DEC, total, total == 1 and " is" or "s are", tolerance_text(atol, rtol), num(maxerr))
end

-- ---- assert.same_signature ------------------------------------------------------

local SIG = "assert.same_signature"

local function is_signature(x) return getmetatable(x) == core.Signature_metatable end

-- a signature's node: a TensorSignature, a ValueSignature or a container
-- ValueTreeSignature, and its kind
local function node(s)
  if s.class == "ValueTreeSignature" and s.leaf then s = s.leaf end
  if s.class == "TensorSignature" then return s, "tensor" end
  if s.class == "ValueSignature" then return s, "value" end
  return s, s.kind
end

local function node_text(s, kind)
  if kind == "tensor" then return ("a %s tensor of shape %s"):format(s.dtype, list_text(s.shape)) end
  if kind == "value" then return ("a %s value"):format(s.type_name) end
  return ("a %s of length %d"):format(kind, #s.children)
end

local function same(x, y)
  if type(x) == "table" and type(y) == "table" then
    if #x ~= #y then return false end
    for i = 1, #x do
      if not same(x[i], y[i]) then return false end
    end
    return true
  end
  return x == y
end

local function value_text(x)
  if type(x) == "table" then return list_text(x) end
  if type(x) == "string" then return x end
  return num(x)
end

local function key_path(k) return ('[%q]'):format(k) end

-- the first difference as path, field, a's value, b's value (texts); nil when none
local function first_difference(a, b, path)
  local na, ka = node(a)
  local nb, kb = node(b)
  if ka ~= kb then return path, "kind", node_text(na, ka), node_text(nb, kb) end
  if ka == "tensor" then
    for _, f in ipairs { "shape", "stride", "dtype", "layout", "requires_grad" } do
      if not same(na[f], nb[f]) then return path, f, value_text(na[f]), value_text(nb[f]) end
    end
    return nil
  elseif ka == "value" then
    for _, f in ipairs { "type_name", "schema_version", "context_id" } do
      if not same(na[f], nb[f]) then return path, f, value_text(na[f]), value_text(nb[f]) end
    end
    local ma, mb = na.metadata, nb.metadata
    local keys, seen = {}, {}
    for _, k in ipairs(na.metadata_keys) do keys[#keys + 1], seen[k] = k, true end
    for _, k in ipairs(nb.metadata_keys) do if not seen[k] then keys[#keys + 1] = k end end
    for _, k in ipairs(keys) do
      if ma[k] == nil or mb[k] == nil or not same(ma[k], mb[k]) then
        return path, k, ma[k] == nil and "(none)" or value_text(ma[k]), mb[k] == nil and "(none)" or value_text(mb[k])
      end
    end
    local ta, tb = na.tensors, nb.tensors
    for i = 1, math.max(#ta, #tb) do
      local x, y = ta[i], tb[i]
      if not x or not y or x.name ~= y.name then
        return path, "tensors", ("tensor %d %s"):format(i, x and ("'" .. x.name .. "'") or "(none)"),
          ("tensor %d %s"):format(i, y and ("'" .. y.name .. "'") or "(none)")
      end
      local p, f, va, vb = first_difference(x.signature, y.signature, path)
      if p then return p, ("tensor '%s' %s"):format(x.name, f), va, vb end
    end
    return nil
  end
  -- containers
  local ca, cb = na.children, nb.children
  if ka == "dict" then
    local sa, sb = {}, {}
    for _, k in ipairs(na.keys) do sa[k] = true end
    for _, k in ipairs(nb.keys) do sb[k] = true end
    for _, k in ipairs(na.keys) do
      if not sb[k] then return path, ("key %q"):format(k), "present", "missing" end
    end
    for _, k in ipairs(nb.keys) do
      if not sa[k] then return path, ("key %q"):format(k), "missing", "present" end
    end
    for i, k in ipairs(na.keys) do
      local p, f, va, vb = first_difference(ca[i], cb[i], path .. key_path(k))
      if p then return p, f, va, vb end
    end
    return nil
  end
  if #ca ~= #cb then return path, "length", tostring(#ca), tostring(#cb) end
  for i = 1, #ca do
    local p, f, va, vb = first_difference(ca[i], cb[i], ("%s[%d]"):format(path, i))
    if p then return p, f, va, vb end
  end
  return nil
end

local function signature_of(x, argn, argname)
  if is_signature(x) then return x end
  local ok, s = pcall(fh.execution.ValueTreeSignature.from_value, x)
  if ok then return s end
  return nil, ("%s: argument %d (%s) is neither a signature nor a value tree: %s"):format(SIG, argn, argname,
    tostring(s))
end

--- The check behind assert.same_signature: ok, message when the signatures
--- differ, message when they are the same.
local function check_same_signature(a, b)
  local sa, ea = signature_of(a, 1, "a")
  if not sa then return false, ea, "" end
  local sb, eb = signature_of(b, 2, "b")
  if not sb then return false, eb, "" end
  local path, field, va, vb = first_difference(sa, sb, "value")
  if path then
    return false, ("%s: the signatures differ at %s, field %s: %s in a, %s in b"):format(SIG, path, field, va, vb), ""
  end
  local ra, rb = node(sa), node(sb)
  if ra ~= rb then -- a difference the walk does not name
    return false, ("%s: the signatures differ: a is %s, b is %s"):format(SIG, tostring(sa), tostring(sb)), ""
  end
  return true, "", ("%s: expected different signatures, both are %s"):format(SIG, tostring(sa))
end

-- ---- assert.raises_kind ---------------------------------------------------------

local RAISES = "assert.raises_kind"

--- The check behind assert.raises_kind: ok, message when fn does not raise
--- such an error, message when it does, and the error.
local function check_raises_kind(kind, fn, needle)
  if type(kind) ~= "string" or errors.parents[kind] == nil and kind ~= "FHEliumError" then
    raise("ValueError", "%s: argument 1 (kind) expected one of %s, got %s", RAISES, table.concat(errors.kinds, ", "),
      type(kind) == "string" and ("'" .. kind .. "'") or typename(kind))
  end
  check_function(RAISES, 2, "fn", fn)
  if needle ~= nil then check_string(RAISES, 3, "needle", needle) end
  local ok, err = pcall(fn)
  local what = needle and ("a %s whose message contains '%s'"):format(kind, needle) or ("a %s"):format(kind)
  if ok then
    return false, ("%s: expected %s, but the function returned without an error"):format(RAISES, what), ""
  end
  if not errors.is_error(err) then
    local shown = type(err) == "string" and ("a string error: " .. err)
      or ("a %s error: %s"):format(typename(err), tostring(err))
    return false, ("%s: expected an fhelium error object (%s), got %s"):format(RAISES, what, shown), ""
  end
  if not errors.is(err, kind) then
    return false, ("%s: expected %s (or a descendant of %s), got %s"):format(RAISES, what, kind, tostring(err)), ""
  end
  if needle and not err.message:find(needle, 1, true) then
    return false, ("%s: expected %s, got %s"):format(RAISES, what, tostring(err)), ""
  end
  local no = needle and ("no %s whose message contains '%s'"):format(kind, needle) or ("no %s"):format(kind)
  return true, "", ("%s: expected %s, got %s"):format(RAISES, no, tostring(err)), err
end

-- ---- registering the assertions with luassert --------------------------------------

local have_luassert, luassert = pcall(require, "luassert")
if have_luassert then
  local say = require "say"
  say:set("assertion.fhelium.message", "%s")
  local function register(name, check)
    luassert:register("assertion", name, function(state, arguments)
      local ok, not_msg, is_msg, ret = check(unpack(arguments, 1, arguments.n))
      -- the message is the check's own text, unformatted
      for i = 1, arguments.n do arguments[i] = nil end
      arguments[1], arguments.n, arguments.nofmt = state.mod and not_msg or is_msg, 1, { true }
      if ret ~= nil then return ok, { ret } end
      return ok
    end, "assertion.fhelium.message", "assertion.fhelium.message")
  end
  register("tensor_near", check_tensor_near)
  register("decrypts_to", check_decrypts_to)
  register("same_signature", check_same_signature)
  register("raises_kind", check_raises_kind)
end

-- ---- specs that need a GPU ----------------------------------------------------------

--- Fail (instead of skip) specs that need GPUs when none are present:
--- FHELIUM_REQUIRE_GPU=1 or `fhelium test --gpu` sets it.
M.require_gpu = os.getenv("FHELIUM_REQUIRE_GPU") == "1"

--- True when at least n (default 1) usable CUDA devices are present.
function M.has_gpu(n)
  n = n or 1
  return fh.cuda.is_available() and fh.cuda.device_count() >= n
end

local function gpu_reason(n)
  if not fh.cuda.is_available() then return "needs a CUDA device: " .. fh.cuda.unavailable_reason() end
  return ("needs %d CUDA devices, %d present"):format(n, fh.cuda.device_count())
end

local function busted_env(fname, level)
  local env = getfenv(level + 1)
  if type(env.it) ~= "function" or type(env.pending) ~= "function" then
    raise("StateError", "%s: no busted `it` in the caller's environment (call it from a spec file that busted runs)",
      fname)
  end
  return env
end

--- skip_it(name, reason): a spec that does not run here, reported as
--- skipped (a busted pending named "<name> (skipped: <reason>)") at the
--- line of the spec file that called skip_it: busted records the line that
--- called `pending`, so this tail-calls it, and a wrapper of skip_it in a
--- spec file must tail-call it too (`return testing.skip_it(name, why)`).
--- The output handler (fhelium.test_output) groups skips by reason.
function M.skip_it(name, reason)
  check_string("testing.skip_it", 1, "name", name)
  check_string("testing.skip_it", 2, "reason", reason)
  return busted_env("testing.skip_it", 2).pending(name .. " (skipped: " .. reason .. ")")
end

local function gpu_spec(fname, n, name, fn, env)
  check_string(fname, n and 2 or 1, "name", name)
  check_function(fname, n and 3 or 2, "fn", fn)
  n = n or 1
  local tagged = name .. " #gpu"
  if M.has_gpu(n) then return env.it(tagged, fn) end
  local reason = gpu_reason(n)
  -- required GPUs: a machine without any fails; one with fewer than n
  -- still skips (a multi-GPU spec cannot run on a one-GPU machine)
  if M.require_gpu and not M.has_gpu(1) then
    return env.it(tagged, function()
      error(("%s: a GPU is required (--gpu or FHELIUM_REQUIRE_GPU=1), but this spec %s"):format(fname, reason), 0)
    end)
  end
  return env.pending(tagged .. " (skipped: " .. reason .. ")")
end

--- gpu_it(name, fn): an `it` tagged #gpu that runs with a usable CUDA
--- device; without one it is skipped with the reason (failed instead when
--- testing.require_gpu is set: FHELIUM_REQUIRE_GPU=1, `fhelium test --gpu`).
function M.gpu_it(name, fn)
  return gpu_spec("testing.gpu_it", nil, name, fn, busted_env("testing.gpu_it", 2))
end

--- gpus_it(n, name, fn): gpu_it for a spec that needs n CUDA devices:
--- skipped with fewer (also under testing.require_gpu when at least one is
--- usable: it asks for a GPU, not for n), failed with none under it.
function M.gpus_it(n, name, fn)
  if type(n) ~= "number" or n < 1 or n ~= math.floor(n) then
    raise(type(n) == "number" and "ValueError" or "TypeError",
      "testing.gpus_it: argument 1 (n) expected a positive integer, got %s",
      type(n) == "number" and num(n) or typename(n))
  end
  return gpu_spec("testing.gpus_it", n, name, fn, busted_env("testing.gpus_it", 2))
end

-- ---- seeds -------------------------------------------------------------------------

-- The running busted element (file, describe, it), tracked through busted's
-- events, so that a seed is per spec. Outside busted there is none. busted
-- can only be followed once it is initialised: at load when a spec file
-- requires this module, else when fhelium.test_output's handler starts
-- (`fhelium test` loads this module before busted exists), else at the
-- first seed().
local stack = {}
local attached = false

--- Follow busted's events (idempotent; false when busted is not running).
function M._attach()
  if attached then return true end
  local ok, busted = pcall(require, "busted")
  if not (ok and type(busted) == "table" and type(busted.subscribe) == "function") then return false end
  attached = true
  local function push(element)
    stack[#stack + 1] = element
    return nil, true
  end
  local function pop(element)
    if stack[#stack] == element then stack[#stack] = nil end
    return nil, true
  end
  for _, what in ipairs { "file", "describe", "test" } do
    busted.subscribe({ what, "start" }, push)
    busted.subscribe({ what, "end" }, pop)
  end
  return true
end
M._attach()
local seeds = setmetatable({}, { __mode = "k" })
local outside = {}

local function fresh_seed()
  local f = io.open("/dev/urandom", "rb")
  if f then
    local s = f:read(4)
    f:close()
    if s and #s == 4 then
      local b1, b2, b3, b4 = s:byte(1, 4)
      local v = ((b1 * 256 + b2) * 256 + b3) * 256 + b4
      return v % 2147483646 + 1
    end
  end
  return (os.time() + math.floor(os.clock() * 1e6)) % 2147483646 + 1
end

--- seed(label): a seed for a randomized spec: the same number for every
--- call with this label within one spec (or describe block), a new one for
--- the next spec; FHELIUM_SEED=<n> makes every seed n (the replay). Printed
--- once per spec and label on stderr as "[seed <label>: <n>]"; the label
--- defaults to the spec's name.
function M.seed(label)
  M._attach()
  local element = stack[#stack]
  if label == nil then label = element and element.name or "spec" end
  check_string("testing.seed", 1, "label", label)
  local memo = outside
  if element then
    memo = seeds[element]
    if memo == nil then
      memo = {}
      seeds[element] = memo
    end
  end
  if memo[label] then return memo[label] end
  local s
  local env = os.getenv("FHELIUM_SEED")
  if env and env ~= "" then
    s = tonumber(env)
    if s == nil or s < 0 or s ~= math.floor(s) then
      raise("ValueError", "testing.seed: FHELIUM_SEED expected a non-negative integer, got '%s'", env)
    end
  else
    s = fresh_seed()
  end
  memo[label] = s
  io.stderr:write(("[seed %s: %d]\n"):format(label, s))
  return s
end

-- ---- engines -----------------------------------------------------------------------

--- Small CKKS parameters for quick specs (N = 2^10, 512 slots, two
--- levels): deliberately insecure (allow_insecure).
M.small = { log_n = 10, q_bits = { 40, 40, 40, 60 }, p_bits = { 60 }, scale = 2 ^ 40, allow_insecure = true }

local function canonical(x)
  if type(x) == "table" then
    local keys = {}
    for k in pairs(x) do keys[#keys + 1] = k end
    table.sort(keys, function(p, q) return tostring(p) < tostring(q) end)
    local parts = {}
    for _, k in ipairs(keys) do parts[#parts + 1] = tostring(k) .. "=" .. canonical(x[k]) end
    return "{" .. table.concat(parts, ",") .. "}"
  end
  if getmetatable(x) == core.CkksContext_metatable then return "context:" .. x.id end
  return type(x) .. ":" .. tostring(x)
end

local engines = {}

--- engine(preset, {device="cpu", seed=1, relin=true, rotations={}, conjugation=false})
--- -> engine, keys: a seeded (insecure: tests only) CkksEngine with its
--- keys, cached, so that specs asking for the same engine share one.
--- preset: what fh.CkksEngine takes (a preset name, a context, bit sizes),
--- nil for testing.small. keys = {sk=, pk=, rlk=, rotation={[step]=key},
--- conjugation=}; the engine remembers its rotation and conjugation keys.
function M.engine(preset, opts)
  opts = check_opts("testing.engine", 2, opts, { "device", "seed", "relin", "rotations", "conjugation" })
  if preset == nil then preset = M.small end
  local seed = opts.seed == nil and 1 or opts.seed
  if type(seed) ~= "number" then
    raise("TypeError", "testing.engine: option 'seed' expected an integer, got %s", typename(seed))
  end
  local rotations = opts.rotations or {}
  if type(rotations) ~= "table" then
    raise("TypeError", "testing.engine: option 'rotations' expected a list of steps, got %s", typename(rotations))
  end
  for i, r in ipairs(rotations) do
    if type(r) ~= "number" or r ~= math.floor(r) then
      raise("TypeError", "testing.engine: option 'rotations'[%d] expected an integer step, got %s", i,
        type(r) == "number" and num(r) or typename(r))
    end
  end
  local relin = opts.relin == nil or opts.relin
  if type(relin) ~= "boolean" then
    raise("TypeError", "testing.engine: option 'relin' expected a boolean, got %s", typename(relin))
  end
  local conj = check_boolean("testing.engine", opts, "conjugation")
  local device = opts.device or "cpu"
  local key = canonical { preset = preset, device = device, seed = seed, relin = relin, rotations = rotations,
    conjugation = conj }
  local hit = engines[key]
  if hit then return hit[1], hit[2] end
  local engine = fh.CkksEngine(preset, { device = device, seed = seed })
  local keys = { rotation = {} }
  keys.sk = engine:create_secret_key()
  keys.pk = engine:create_public_key(keys.sk)
  if relin then keys.rlk = engine:create_relinearization_key(keys.sk) end
  for _, r in ipairs(rotations) do keys.rotation[r] = engine:create_rotation_key(keys.sk, r) end
  if conj then keys.conjugation = engine:create_conjugation_key(keys.sk) end
  engines[key] = { engine, keys }
  return engine, keys
end

return M
