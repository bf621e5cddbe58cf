-- fhelium.execution (also fh.execution): signatures of tensors, values and
-- trees (docs/api.md "Execution: signatures"). Signatures are engine objects
-- (engine/exec/signature.c); the tree walk and validation run in C
-- (engine/binding/l_signature.c) because replay validation is a hot path.
local core = require "fhelium.core"

local ex = {}

ex.TensorSignature = {
  --- Shape, stride, dtype, layout and requires_grad of `t` (not its device).
  from_tensor = core.tensor_signature,
}
ex.ValueSignature = {
  --- Type, schema version, context id, exact state (metadata, sorted by
  --- name) and the ordered signatures of the value's tensors.
  from_value = core.value_signature,
}
ex.ValueTreeSignature = {
  --- The signature of a tree of tensors and values: kind (tensor, value,
  --- list, tuple, dict), children, sorted dict keys.
  from_value = core.tree_signature,
}

--- ex.tuple(a, b, ...): a tuple container (a table with the tuple
--- metatable; elements at 1..n, no nil). Its length is fixed: adding an
--- element is a TypeError. It stays a plain table so that # and ipairs
--- work, so Lua cannot refuse the reassignment of an existing element;
--- trees are validated whenever they are used, so a bad element is caught
--- there.
ex.tuple = core.tuple
ex.is_tuple = core.is_tuple

local tuple_mt = core.tuple_metatable
tuple_mt.__tostring = function(t)
  local parts = {}
  for i = 1, #t do parts[i] = tostring(t[i]) end
  return "tuple(" .. table.concat(parts, ", ") .. ")"
end

-- buffers, copy handles and programs (lua/fhelium/programs.lua)
require("fhelium.programs").install(ex)

package.loaded["fhelium.execution"] = ex
return ex
