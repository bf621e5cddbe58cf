-- Writes into self-overlapping views (API.md "Tensors"; docs/tensors.md
-- "Writing into views"). An expanded (stride-0) view, or any layout whose
-- strides make two indices share one memory location, can be read but never
-- written: every in-place and out= entry point refuses it with a ValueError
-- naming the function, before anything is written. Non-overlapping views
-- (transposed, narrowed, selected, size-1 stride-0 dims) stay writable.
local fh = require "fhelium"
local ex = require "fhelium.execution"
local H = require "spec.helpers"

local MSG = "unsupported operation: more than one element of the written%-to tensor refers to a single memory location"

local function suite(dev, it_)
  local function f64(t) return fh.tensor(t, { dtype = "float64", device = dev }) end
  local function u64(shape) return fh.zeros(shape, { dtype = "uint64", device = dev }) end

  -- overlapping layouts: (base, view) pairs, the base holding 1..k
  local function layouts()
    local a = f64({ { 1, 2, 3 } })   -- 1x3 -> 2x3, strides {0, 1}
    local b = f64({ { 1 }, { 2 } })  -- 2x1 -> 2x4, strides {1, 0}
    local c = f64({ { { 1, 2 } } })  -- 1x1x2 -> 3x2x2 (strides {0, 0, 1}), transposed: {1, 0, 0}
    return {
      { "leading stride 0", a, a:expand(2, 3) },
      { "trailing stride 0", b, b:expand(2, 4) },
      { "stride 0 in the middle, transposed", c, c:expand(3, 2, 2):transpose(1, 3) },
      { "a new leading dimension", a, a:expand(4, 1, 3) },
    }
  end

  local function refuses(fn_name, arg, f, base, before)
    local err = H.expect_error("ValueError", { "^" .. fn_name:gsub("[%.%[%]]", "%%%0") .. ": " .. MSG, "%(" .. arg .. " is" },
      f)
    assert.same(before, base:tolist(), fn_name .. " wrote into the base before refusing")
    return err
  end

  it_("refuses every in-place operator, copy_ and fill_ on a self-overlapping view, writing nothing", function()
    for _, l in ipairs(layouts()) do
      local name, base, v = l[1], l[2], l[3]
      assert.is_true(v:numel() > base:numel(), name)
      local before = base:tolist()
      local same = fh.ones(v.shape, { dtype = "float64", device = dev })
      refuses("Tensor:add_", "self", function() v:add_(1) end, base, before)
      refuses("Tensor:sub_", "self", function() v:sub_(same) end, base, before)
      refuses("Tensor:mul_", "self", function() v:mul_(2) end, base, before)
      refuses("Tensor:div_", "self", function() v:div_(same) end, base, before)
      refuses("Tensor:neg_", "self", function() v:neg_() end, base, before)
      refuses("Tensor:copy_", "self", function() v:copy_(same) end, base, before)
      refuses("Tensor:copy_", "self", function() v:copy_(same:cpu()) end, base, before) -- from another device too
      refuses("Tensor:fill_", "self", function() v:fill_(7) end, base, before)
    end
  end)

  it_("refuses an out= argument that is self-overlapping, for every operator that takes one", function()
    local base = f64({ { 1, 2, 3 } })
    local before = base:tolist()
    local out = base:expand(2, 3)
    local x = f64({ { 1, 2, 3 }, { 4, 5, 6 } })
    for _, op in ipairs { "add", "sub", "mul", "div" } do
      refuses("fh." .. op, "out", function() fh[op](x, x, { out = out }) end, base, before)
      refuses("fh." .. op, "out", function() fh[op](x, 2, { out = out }) end, base, before)
      refuses("fh." .. op, "out", function() fh[op](2, x, { out = out }) end, base, before)
    end
    refuses("fh.neg", "out", function() fh.neg(x, { out = out }) end, base, before)
    -- out = the overlapping operand itself, through the functional form: an in-place add_
    refuses("fh.add: add_", "self", function() fh.add(out, 1, { out = out }) end, base, before)
    local ubase = u64({ 1, 4 })
    local uout = ubase:expand(3, 4)
    local ua = u64({ 3, 4 })
    local q = { 7, 11, 13 }
    for _, op in ipairs { "add", "sub", "mul" } do
      refuses("fh.rns." .. op, "out", function() fh.rns[op](ua, ua, q, { out = uout }) end, ubase, ubase:tolist())
    end
    refuses("fh.rns.neg", "out", function() fh.rns.neg(ua, q, { out = uout }) end, ubase, ubase:tolist())
    refuses("fh.rns.add", "out", function() fh.rns.add(uout, uout, q, { out = uout }) end, ubase, ubase:tolist())
  end)

  it_("refuses indexed assignment into a self-overlapping row, naming Tensor.__newindex", function()
    local base = f64({ { { 1, 2, 3 } } })
    local v = base:expand(2, 2, 3) -- v[1] is 2x3 with strides {0, 1}
    local before = base:tolist()
    refuses("Tensor.__newindex: fill_", "self", function() v[1] = 5 end, base, before)
    refuses("Tensor.__newindex: copy_", "self", function() v[1] = fh.ones({ 2, 3 }, { dtype = "float64", device = dev }) end,
      base, before)
  end)

  it_("keeps reads from self-overlapping views working", function()
    local base = f64({ { 1, 2, 3 } })
    local v = base:expand(2, 3)
    assert.same({ { 1, 2, 3 }, { 1, 2, 3 } }, v:tolist())
    assert.same({ { 2, 3, 4 }, { 2, 3, 4 } }, (v + 1):tolist())
    assert.same({ { -1, -2, -3 }, { -1, -2, -3 } }, (-v):tolist())
    assert.equal(12, fh.sum(v):item())
    local dst = fh.zeros({ 2, 3 }, { dtype = "float64", device = dev })
    dst:copy_(v)
    assert.same(v:tolist(), dst:tolist())
    fh.mul(v, v, { out = dst })
    assert.same({ { 1, 4, 9 }, { 1, 4, 9 } }, dst:tolist())
    local c = v:contiguous()
    c:add_(1) -- a copy: writable
    assert.same({ { 2, 3, 4 }, { 2, 3, 4 } }, c:tolist())
    assert.same({ { 1, 2, 3 } }, base:tolist())
    assert.is_true(fh.equal(v:clone(), v))
  end)

  it_("writes into views that do not overlap themselves", function()
    -- narrowed and transposed
    local t = fh.zeros({ 4, 6 }, { dtype = "float64", device = dev })
    t:narrow(2, 2, 3):transpose(1, 2):add_(1)
    assert.equal(12, fh.sum(t):item())
    assert.same({ 0, 1, 1, 1, 0, 0 }, t:tolist()[3])
    -- a row of an expanded view addresses each base element once
    local base = f64({ { 1, 2, 3 } })
    local v = base:expand(2, 3)
    v[1] = 9
    assert.same({ { 9, 9, 9 } }, base:tolist())
    v:select(1, 2):mul_(2)
    assert.same({ { 18, 18, 18 } }, base:tolist())
    -- stride 0 on a dimension of size 1 repeats nothing
    local one = f64({ 1, 2, 3 }):expand(1, 3)
    one:fill_(4)
    assert.same({ { 4, 4, 4 } }, one:tolist())
    -- an expanded view with no elements has nothing to overlap
    local empty = fh.zeros({ 1, 0 }, { dtype = "float64", device = dev }):expand(5, 0)
    empty:add_(1)
    empty:copy_(fh.zeros({ 5, 0 }, { dtype = "float64", device = dev }))
    assert.same({ 5, 0 }, empty.shape)
    -- a 0-dim tensor expanded to one element
    local s = f64(3):expand(1)
    s:add_(1)
    assert.equal(4, s:item())
  end)

  it_("gives buffers only writable targets: like refuses a self-overlapping example", function()
    local e = f64({ { 1, 2, 3 } }):expand(2, 3)
    H.expect_error("ValueError", { "ReusableValueBuffer.like", "example%[2%]", "overlap in memory", "contiguous%(%)" },
      ex.ReusableValueBuffer.like, { f64({ 1 }), e })
    local buf = ex.ReusableValueBuffer.like({ e:contiguous() }) -- a dense copy of it is fine
    assert.same(e:tolist(), buf.value[1]:tolist())
    assert.is_false(buf.value[1]:stride()[1] == 0)
    buf:close()
  end)
end

describe("writes into self-overlapping views (cpu)", function()
  suite("cpu", it)
end)

describe("writes into self-overlapping views (cuda)", function()
  suite("cuda", H.gpu_it)
end)
