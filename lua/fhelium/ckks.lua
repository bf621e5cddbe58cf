-- fh.CkksEngine (docs/api.md "CKKS values and engine"): the C engine
-- (engine/ckks/ckks_engine.c, ckks_eval.c) does the work and checks every
-- precondition; this layer turns Lua messages (numbers, lists, nested lists
-- for batches, lists of {re, im} pairs with complex = true) into
-- float64/complex128 tensors and reads option tables.
--
--   local engine = fh.CkksEngine(fh.Preset.slots8192_scale40_levels7_int64, {device="cpu", seed=nil})
--   local engine = fh.CkksEngine({log_n=12, q_bits={40, 40, 60}, p_bits={60}, scale=2^40})
--
-- `seed=` makes every key, mask and error a deterministic function of the
-- seed: for tests only, INSECURE for real data.
local core = require "fhelium.core"
local errors = require "fhelium.errors"

local M = {}
local methods = core.CkksEngine_methods

local function raise(kind, msg) errors.raise(kind, msg) end

local function check_opts(fn, opts, allowed)
  if opts == nil then return {} end
  if type(opts) ~= "table" or core.is_tensor(opts) then
    raise("TypeError", ("CkksEngine:%s: options expected a table, got %s"):format(fn, type(opts)))
  end
  for k in pairs(opts) do
    if not allowed[k] then
      local names = {}
      for n in pairs(allowed) do names[#names + 1] = n end
      table.sort(names)
      raise("ValueError", ("CkksEngine:%s: unknown option '%s' (expected %s)"):format(fn, tostring(k),
        table.concat(names, ", ")))
    end
  end
  return opts
end

--- A message tensor (float64 or complex128) from the forms of docs/ckks.md
--- ("Messages"): a number (every slot), a list of numbers (real slots),
--- nested lists (a batch [*batch, slot]), with complex = true lists of
--- {re, im} pairs, or a tensor (float64, complex128; other real dtypes are
--- converted to float64; 0-dim: every slot). The shape never depends on
--- the lengths: a table of numbers is always a list of real slots.
function M.to_message(msg, fn, complex)
  local name = "CkksEngine:" .. fn
  if core.is_tensor(msg) then
    if complex then
      raise("TypeError", ("%s: option complex = true applies to Lua lists, got a %s tensor for msg (a complex128 " ..
        "tensor is complex already)"):format(name, msg.dtype))
    end
    if msg.dtype == "float64" or msg.dtype == "complex128" then return msg end
    if msg.dtype == "bool" then
      raise("TypeError", ("%s: msg expected a number, a list or a float64/complex128 tensor, got a bool tensor"):format(name))
    end
    return core.tensor(msg, { dtype = "float64" })
  end
  if type(msg) == "number" then
    if complex then
      raise("TypeError", ("%s: msg with complex = true expected a list of {re, im} pairs, got number"):format(name))
    end
    return core.full({}, msg, { dtype = "float64" })
  end
  if type(msg) == "table" then
    if #msg == 0 then raise("ValueError", ("%s: msg is an empty list (expected at least one slot)"):format(name)) end
    return core._message_tensor(msg, complex, name)
  end
  raise("TypeError", ("%s: msg expected a number, a list or a tensor, got %s"):format(name, core.typename(msg)))
end

local encode_opts = { level = true, scale = true, complex = true }
local function encode_options(self, fn, opts)
  opts = check_opts(fn, opts, encode_opts)
  local level = opts.level or 0
  local scale = opts.scale or self.context.default_scale
  if type(level) ~= "number" then
    raise("TypeError", ("CkksEngine:%s: option 'level' expected an integer, got %s"):format(fn, type(level)))
  end
  if type(scale) ~= "number" then
    raise("TypeError", ("CkksEngine:%s: option 'scale' expected a number, got %s"):format(fn, type(scale)))
  end
  if opts.complex ~= nil and type(opts.complex) ~= "boolean" then
    raise("TypeError", ("CkksEngine:%s: option 'complex' expected a boolean, got %s"):format(fn, type(opts.complex)))
  end
  return level, scale, opts.complex == true
end

--- engine:encode(msg, {level=0, scale=context.default_scale, complex=false, basis="Q"})
--- -> RNS Plaintext (coefficient domain). msg: see M.to_message (missing
--- slots are zero). basis = "QP" adds the rows of the P primes (the
--- plaintexts of engine:linear_transform).
local encode_basis_opts = { level = true, scale = true, complex = true, basis = true }
function methods.encode(self, msg, opts)
  local basis = "Q"
  if opts ~= nil then
    check_opts("encode", opts, encode_basis_opts)
    if opts.basis ~= nil then
      if opts.basis ~= "Q" and opts.basis ~= "QP" then
        raise("ValueError", ("CkksEngine:encode: option 'basis' expected \"Q\" or \"QP\", got %s"):format(
          type(opts.basis) == "string" and ("'" .. opts.basis .. "'") or type(opts.basis)))
      end
      basis = opts.basis
      local rest = {}
      for k, v in pairs(opts) do if k ~= "basis" then rest[k] = v end end
      opts = rest
    end
  end
  local level, scale, complex = encode_options(self, "encode", opts)
  return self:_encode(M.to_message(msg, "encode", complex), level, scale, "encode", basis)
end

local decode_opts = { is_real = true }
local function is_real_opt(fn, opts)
  opts = check_opts(fn, opts, decode_opts)
  if opts.is_real ~= nil and type(opts.is_real) ~= "boolean" then
    raise("TypeError", ("CkksEngine:%s: is_real expected a boolean, got %s"):format(fn, type(opts.is_real)))
  end
  return opts.is_real == true
end

-- f(...) under the name of the Lua-side method that called it: an error
-- "CkksEngine:<inner>: ..." becomes "CkksEngine:<method>: ..."
local function as(method, f, ...)
  local res = { pcall(f, ...) }
  if res[1] then return unpack(res, 2, table.maxn(res)) end
  local err = res[2]
  if errors.is_error(err) then
    local msg = err.message:gsub("^CkksEngine:[%w_]+: ", "CkksEngine:" .. method .. ": ", 1)
    error(errors.new(err.kind, msg, { path = err.path, stage = err.stage }), 0)
  end
  error(err, 0)
end

--- engine:decode(pt, {is_real=false}) -> complex128 (or float64) tensor [*batch, num_slots]
function methods.decode(self, pt, opts)
  local pt_rns = pt
  if core.is_value(pt) and pt.representation == "slots" then pt_rns = as("decode", self.encode_plaintext, self, pt) end
  return self:_decode(pt_rns, is_real_opt("decode", opts), "decode")
end

--- engine:encrypt_message(msg, pk, {level=, scale=, complex=}) = encrypt(encode(msg), pk)
function methods.encrypt_message(self, msg, pk, opts)
  local level, scale, complex = encode_options(self, "encrypt_message", opts)
  local pt = self:_encode(M.to_message(msg, "encrypt_message", complex), level, scale, "encrypt_message")
  return as("encrypt_message", self.encrypt, self, pt, pk)
end

--- engine:decrypt_message(ct, sk, {is_real=false}) -> the decoded message tensor
function methods.decrypt_message(self, ct, sk, opts)
  local real = is_real_opt("decrypt_message", opts)
  return self:_decode(as("decrypt_message", self.decrypt, self, ct, sk), real, "decrypt_message")
end

--- Install the public names into the fh table.
function M.install(fh)
  fh.CkksEngine = core.CkksEngine
end

return M
