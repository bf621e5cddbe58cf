-- scripts/check-layers: the engine's include order (README.md, Architecture).
local cli = require "spec.support.cli"

local function sh(cmd)
  local p = io.popen(cmd .. " 2>&1; echo \"rc=$?\"")
  local out = p:read("*a")
  p:close()
  local rc = tonumber(out:match("rc=(%d+)%s*$"))
  return rc, out
end

local script = cli.quote(cli.root .. "/scripts/check-layers")

describe("scripts/check-layers", function()
  it("passes on the tree as it is", function()
    local rc, out = sh(script)
    assert.are.equal(0, rc, out)
    assert.truthy(out:find("0 violations", 1, true), out)
  end)

  it("fails, naming file, line and both layers, when a lower layer includes a higher one", function()
    -- the same tree judged by a README whose table puts ckks below tensor:
    -- the CKKS sources include tensor headers, so every such include of
    -- fh/tensor.h etc. from engine/ckks is now upward
    local f = assert(io.open(cli.root .. "/README.md"))
    local readme = f:read("*a")
    f:close()
    local tensor_row = readme:match("\n(| tensor | [^\n]*)")
    local ckks_row = readme:match("\n(| ckks | [^\n]*)")
    assert.truthy(tensor_row and ckks_row)
    local swapped = readme:gsub("| tensor | [^\n]*", "@@T@@", 1):gsub("| ckks | [^\n]*", tensor_row, 1)
    swapped = swapped:gsub("@@T@@", function() return ckks_row end, 1)
    local tmp = os.tmpname()
    f = assert(io.open(tmp, "w"))
    f:write(swapped)
    f:close()
    local rc, out = sh("FHELIUM_LAYERS_README=" .. cli.quote(tmp) .. " " .. script)
    os.remove(tmp)
    assert.are.equal(1, rc, out)
    assert.truthy(out:find("engine/ckks/[%w_]+%.c:%d+: the ckks layer includes \"fh/[%w_]+%.h\"[^\n]* of the tensor layer, a higher one"),
      out)
    assert.truthy(out:match("layers: %d+ files checked, [1-9]%d* violations"), out)
  end)

  it("fails when an engine folder or a public header is not in the table", function()
    local f = assert(io.open(cli.root .. "/README.md"))
    local readme = f:read("*a")
    f:close()
    local cut = readme:gsub("\n| app | [^\n]*", "", 1):gsub("`fh/bench_aid.h`", "", 1)
    local tmp = os.tmpname()
    f = assert(io.open(tmp, "w"))
    f:write(cut)
    f:close()
    local rc, out = sh("FHELIUM_LAYERS_README=" .. cli.quote(tmp) .. " " .. script)
    os.remove(tmp)
    assert.are.equal(1, rc, out)
    assert.truthy(out:find("engine/app/: folder not in", 1, true), out)
    assert.truthy(out:find("engine/include/fh/bench_aid.h: header not listed", 1, true), out)
  end)
end)
