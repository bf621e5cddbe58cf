-- Value files at scale and at the edges of the operating system: trees of
-- many tensors (the writer's growable arrays), a round-trip property over
-- random trees, loading in O(n log n), and every I/O failure as an IOError
-- naming the function, the path and strerror.
local fh = require "fhelium"
local ex = require "fhelium.execution"
local ffi = require "ffi"
local H = require "spec.helpers"
local T = require "spec.fixtures.small_context"
local cli = require "spec.support.cli"

local seed = H.seed("value_io")
math.randomseed(seed)

local ctx = T.context()
local ctx2 = T.context { skip = 7 }
local N = ctx.ring_degree

local function sh_ok(cmd) return os.execute(cmd .. " >/dev/null 2>&1") == 0 end

local function tmpdir()
  local d = os.tmpname()
  os.remove(d)
  assert(sh_ok("mkdir -p " .. cli.quote(d)))
  return d
end

local function ls(dir)
  local p = io.popen("ls -A " .. cli.quote(dir))
  local r = {}
  for line in p:lines() do r[#r + 1] = line end
  p:close()
  table.sort(r)
  return r
end

local function escape(s) return (s:gsub("%p", "%%%0")) end

-- structural equality of two trees; saved copies are contiguous, so strides
-- are not compared (everything else is)
local function same(a, b, path)
  path = path or "tree"
  if fh.is_value(a) then
    assert(fh.is_value(b), path .. ": expected a value")
    assert(fh.value_equal(a, b), path .. ": values differ")
    return
  end
  if fh.is_tensor(a) then
    assert(fh.is_tensor(b), path .. ": expected a tensor, got " .. type(b))
    assert(a.dtype == b.dtype, path .. ": dtype " .. a.dtype .. " ~= " .. tostring(b.dtype))
    assert(table.concat(a.shape, ",") == table.concat(b.shape, ","), path .. ": shapes differ")
    assert(a.requires_grad == b.requires_grad, path .. ": requires_grad differs")
    assert(fh.equal(a, b), path .. ": elements differ")
    return
  end
  assert(type(a) == "table" and type(b) == "table", path .. ": expected a container")
  assert(ex.is_tuple(a) == ex.is_tuple(b), path .. ": tuple-ness differs")
  local ka, kb = {}, {}
  for k in pairs(a) do ka[#ka + 1] = k end
  for k in pairs(b) do kb[#kb + 1] = k end
  assert(#ka == #kb, ("%s: %d children, loaded %d"):format(path, #ka, #kb))
  for k, v in pairs(a) do same(v, b[k], ("%s[%q]"):format(path, tostring(k))) end
end

-- ---- random trees ----------------------------------------------------------------
local dtypes = { "bool", "uint8", "int32", "int64", "uint32", "uint64", "float32", "float64", "complex128" }

local function rand_shape()
  local nd = math.random(0, 3)
  local s = {}
  for i = 1, nd do s[i] = math.random(0, 3) end
  return s
end

local function numel(shape)
  local n = 1
  for _, e in ipairs(shape) do n = n * e end
  return n
end

local function rand_elem(dt)
  if dt == "bool" then return math.random() < 0.5 end
  if dt == "uint8" then return math.random(0, 255) end
  if dt == "int32" then return math.random(-2 ^ 31, 2 ^ 31 - 1) end
  if dt == "uint32" then return math.random(0, 2 ^ 32 - 1) end
  if dt == "int64" then return ffi.cast("int64_t", math.random(-2 ^ 31, 2 ^ 31)) * math.random(-2 ^ 31, 2 ^ 31) end
  if dt == "uint64" then return ffi.cast("uint64_t", math.random(0, 2 ^ 32 - 1)) * 2 ^ 32 + math.random(0, 2 ^ 32 - 1) end
  local x = ({ 0, -0.0, 1 / 3, 1e300, -5e-324, math.huge, -math.huge, (math.random() - 0.5) * 2 ^ math.random(-60, 60) })[math.random(1, 8)]
  if dt == "complex128" then return { x, (math.random() - 0.5) * 100 } end
  return x
end

local function rand_tensor()
  local dt = dtypes[math.random(#dtypes)]
  local shape = rand_shape()
  local t
  if #shape == 0 then
    t = fh.full({}, 0, { dtype = dt })
    t:fill_(rand_elem(dt))
  else
    local flat = {}
    for i = 1, numel(shape) do flat[i] = rand_elem(dt) end
    t = numel(shape) > 0 and fh.tensor(flat, { dtype = dt }):view(shape) or fh.zeros(shape, { dtype = dt })
  end
  if #shape >= 2 and math.random() < 0.3 then t = t:transpose(1, 2) end -- a strided view
  if math.random() < 0.2 then t:requires_grad_(true) end
  return t
end

local function rand_u64(shape, c)
  local flat = {}
  for i = 1, numel(shape) do flat[i] = math.random(0, 2 ^ 31 - 1) end
  return fh.tensor(flat, { dtype = "uint64" }):view(shape)
end

local value_makers = {
  function(c) return fh.Ciphertext { data = rand_u64({ 2, 3, N }), context = c } end,
  function(c) return fh.Ciphertext { data = rand_u64({ 3, 2, 2, N }), context = c, level = 1, scale = 1234.5, polynomial_domain = "ntt" } end,
  function(c) return fh.Plaintext { message = fh.randn({ 2, 3 }, { dtype = "float64" }), scale = 2 ^ 30 } end,
  function(c) return fh.Plaintext { message = fh.tensor({ { 1, -2 }, { 0.5, 3 } }, { dtype = "complex128" }), context = c, level = 1 } end,
  function(c) return fh.Plaintext { data = rand_u64({ 3, N }), context = c, residue_representation = "montgomery" } end,
  function(c) return fh.SecretKey { data = rand_u64({ 4, N }), context = c } end,
  function(c) return fh.PublicKey { data = rand_u64({ 2, 4, N }), context = c, polynomial_domain = "ntt" } end,
  function(c) return fh.RotationKey { data = rand_u64({ 1, 2, 4, N }), context = c, step = math.random(1, 7), polynomial_domain = "ntt" } end,
}

local function rand_leaf()
  if math.random() < 0.15 then
    return value_makers[math.random(#value_makers)](math.random() < 0.5 and ctx or ctx2)
  end
  return rand_tensor()
end

local key_chars = { "a", "b", "z", "0", "_", ".", "[", "]", '"', "\\", "\n", "\0", " ", "é", "→" }
local function rand_key()
  local k = {}
  for i = 1, math.random(0, 6) do k[i] = key_chars[math.random(#key_chars)] end
  return table.concat(k)
end

-- a random tree of exactly `n` leaves (tensors and values), nested at most
-- `depth` more levels; empty containers appear on the way
local function rand_tree(n, depth)
  if n == 1 and (depth == 0 or math.random() < 0.6) then return rand_leaf() end
  if depth == 0 then -- flat
    local l = {}
    for i = 1, n do l[i] = rand_leaf() end
    return l
  end
  local k = n == 0 and 0 or math.random(1, math.min(n, n > 200 and 40 or 8))
  local counts = {}
  for i = 1, k do counts[i] = 0 end
  for _ = 1, n do
    local i = math.random(1, k)
    counts[i] = counts[i] + 1
  end
  if math.random() < 0.3 then counts[#counts + 1] = 0 end -- an empty container among the children
  local children = {}
  for i, c in ipairs(counts) do children[i] = rand_tree(c, depth - 1) end
  local kind = math.random(1, 3)
  if kind == 1 then return children end
  if kind == 2 then return ex.tuple(unpack(children, 1, #children)) end
  local d, used = {}, {}
  for _, c in ipairs(children) do
    local key
    repeat key = rand_key() until not used[key] and key ~= ""
    used[key] = true
    d[key] = c
  end
  if next(d) == nil then return {} end
  return d
end

local function count_leaves(t)
  if fh.is_tensor(t) or fh.is_value(t) then return 1 end
  local n = 0
  for _, v in pairs(t) do n = n + count_leaves(v) end
  return n
end

describe("value files with many tensors", function()
  local dir
  before_each(function() dir = tmpdir() end)
  after_each(function() sh_ok("rm -rf " .. cli.quote(dir)) end)

  it("round-trip 17 tensors of different shapes (past the writer's first 16 entries)", function()
    local l = {}
    for i = 1, 17 do l[i] = fh.full({ i % 3 + 1, i % 2 + 1 }, i, { dtype = "int64" }) end
    same(l, fh.deserialize(fh.serialize(l)))
    fh.save(l, dir .. "/17.safetensors")
    same(l, fh.load(dir .. "/17.safetensors"))
  end)

  it("round-trip 2,000 tensors and values through save and load", function()
    local l = {}
    for i = 1, 2000 do
      l[i] = i % 100 == 0 and fh.Ciphertext { data = rand_u64({ 2, 3, N }), context = ctx }
        or fh.full({ i % 5, 2 }, i % 100, { dtype = dtypes[i % #dtypes + 1] })
    end
    local path = dir .. "/2000.safetensors"
    fh.save(l, path)
    same(l, fh.load(path))
    same(l, fh.deserialize(fh.serialize(l)))
  end)

  it("round-trip random trees of 0 to 5,000 leaves (nested lists, tuples, dicts, every dtype, CKKS values)", function()
    local sizes = { 0, 1, 2, 15, 16, 17, 33, math.random(34, 300), math.random(300, 1500), 5000 }
    for _, n in ipairs(sizes) do
      local tree = rand_tree(n, math.random(0, 7))
      assert.equal(n, count_leaves(tree))
      local bytes = fh.serialize(tree, { allow_secret = true })
      same(tree, fh.deserialize(bytes), ("tree of %d leaves (seed %d)"):format(n, seed))
      local path = dir .. "/tree.safetensors"
      fh.save(tree, path, { allow_secret = true, overwrite = true })
      same(tree, fh.load(path), ("saved tree of %d leaves (seed %d)"):format(n, seed))
      -- the file is the serialized bytes
      local f = assert(io.open(path, "rb"))
      assert.is_true(f:read("*a") == bytes)
      f:close()
    end
    assert.same({ "tree.safetensors" }, ls(dir))
  end)
end)

describe("loading many tensors", function()
  -- one-byte U8 entries named in descending order (the worst case of an
  -- insertion sort), as a plain safetensors file
  local function plain_blob(n)
    local parts, data = { "{" }, {}
    for i = n, 1, -1 do
      local off = n - i
      parts[#parts + 1] = ('"t%07d":{"dtype":"U8","shape":[1],"data_offsets":[%d,%d]}%s'):format(i, off, off + 1,
        i > 1 and "," or "")
      data[#data + 1] = string.char(i % 256)
    end
    parts[#parts + 1] = "}"
    local h = table.concat(parts)
    local len = {}
    for i = 0, 7 do len[#len + 1] = string.char(math.floor(#h / 2 ^ (8 * i)) % 256) end
    return table.concat(len) .. h .. table.concat(data)
  end

  local n = 100000
  -- generous: the benchmark (scripts/bench/value_io.lua) targets < 1 s; a
  -- quadratic loader needs over a minute for this many entries
  local limit = 10

  it("loads a plain file of 100,000 entries in O(n log n), keys sorted", function()
    local bytes = plain_blob(n)
    local t0 = os.clock()
    local d = fh.deserialize(bytes)
    local dt = os.clock() - t0
    io.stderr:write(("[plain file, %d entries: %.2f s]\n"):format(n, dt))
    assert.is_true(dt < limit, ("took %.1f s (limit %d s)"):format(dt, limit))
    assert.equal(7 % 256, d.t0000007:item())
    assert.equal(n % 256, d[("t%07d"):format(n)]:item())
    -- leaf order is the sorted key order
    local sig = ex.ValueTreeSignature.from_value(d)
    assert.equal(n, #sig.keys)
    assert.equal("t0000001", sig.keys[1])
    assert.equal(("t%07d"):format(n), sig.keys[n])
  end)

  it("loads a saved list of 100,000 tensors in O(n log n)", function()
    local l = {}
    for i = 1, n do l[i] = fh.full({ 1 }, i % 256, { dtype = "uint8" }) end
    local bytes = fh.serialize(l)
    l = nil
    local t0 = os.clock()
    local back = fh.deserialize(bytes)
    local dt = os.clock() - t0
    io.stderr:write(("[fhelium file, %d entries: %.2f s]\n"):format(n, dt))
    assert.is_true(dt < limit, ("took %.1f s (limit %d s)"):format(dt, limit))
    assert.equal(n, #back)
    for _, i in ipairs { 1, 2, 255, 256, 257, n } do assert.equal(i % 256, back[i]:item()) end
  end)
end)

-- ---- I/O failures ---------------------------------------------------------------------
local function is_root()
  local p = io.popen("id -u")
  local u = p:read("*l")
  p:close()
  return u == "0"
end

-- an IOError whose message begins with `fn: ` and matches every pattern
local function io_error(fn, patterns, f, ...)
  local err = H.expect_error("IOError", patterns, f, ...)
  assert.equal("IOError", err.kind)
  assert.is_true(fh.errors.is(err, "FHEliumError"))
  assert.is_false(fh.errors.is(err, "ValueError"))
  assert.equal(fn .. ": ", err.message:sub(1, #fn + 2))
  return err
end

-- Lua code for a child fhelium that runs `body` (which sets `err`) and
-- prints the error's kind and message on two lines, then `after`
local function child_code(body)
  return "local fh = require 'fhelium'\n" .. "local ok, err = pcall(function() " .. body .. " end)\n" ..
    "if ok then print('OK') print('no error') else print(err.kind) print(err.message) end\n"
end

local function child_result(r)
  local lines = cli.lines(r.stdout)
  return lines[1], lines[2], lines
end

describe("I/O failures", function()
  local dir
  before_each(function() dir = tmpdir() end)
  after_each(function()
    sh_ok("chmod -R u+rwx " .. cli.quote(dir))
    sh_ok("rm -rf " .. cli.quote(dir))
  end)

  it("IOError is a kind under FHEliumError", function()
    local e = fh.errors.new("IOError", "x")
    assert.is_true(fh.errors.is(e, "IOError"))
    assert.is_true(fh.errors.is(e, "FHEliumError"))
    assert.equal("IOError: x", tostring(e))
    local found = false
    for _, k in ipairs(fh.errors.kinds) do found = found or k == "IOError" end
    assert.is_true(found)
  end)

  it("a missing file", function()
    local p = dir .. "/no-such-file"
    local err = io_error("fh.load", "^fh%.load: cannot open '" .. escape(p) .. "': No such file or directory$", fh.load, p)
    assert.is_nil(err.path)
    io_error("fh.load", "cannot open '" .. escape(dir) .. "/no/such/dir/f': No such file or directory", fh.load,
      dir .. "/no/such/dir/f")
    io_error("fh.load", "^fh%.load: cannot open '': No such file or directory$", fh.load, "")
  end)

  it("a directory as the path to load", function()
    io_error("fh.load", "^fh%.load: cannot read '" .. escape(dir) .. "': Is a directory$", fh.load, dir)
  end)

  it("a FIFO as the path to load: refused at once, never waiting for a writer", function()
    local fifo = dir .. "/pipe"
    assert.is_true(sh_ok("mkfifo " .. cli.quote(fifo)))
    -- in a child with a time limit: a loader that opens the FIFO for
    -- reading blocks until a writer comes
    local r = cli.sh("timeout 20 " .. cli.quote(cli.bin) .. " -e " .. cli.quote(child_code("fh.load(" .. ("%q"):format(fifo) .. ")")))
    assert.are_not.equal(124, r.code, "fh.load on a FIFO hung (killed after 20 s)")
    local kind, msg = child_result(r)
    assert.equal("IOError", kind, r.stdout .. r.stderr)
    assert.equal("fh.load: cannot read '" .. fifo .. "': it is a FIFO (named pipe), not a regular file", msg)
    -- in this process too (it returns at once now)
    io_error("fh.load", "it is a FIFO %(named pipe%), not a regular file", fh.load, fifo)
    -- a character device
    io_error("fh.load", "^fh%.load: cannot read '/dev/null': it is a character device, not a regular file$", fh.load,
      "/dev/null")
  end)

  it("a path with a NUL byte is refused (the C library would open another file)", function()
    fh.save(fh.ones(1), dir .. "/a")
    H.expect_error("ValueError", "fh.load: argument 1 %(path%) must not contain a NUL byte", fh.load, dir .. "/a\0b")
    H.expect_error("ValueError", "fh.save: argument 2 %(path%) must not contain a NUL byte", fh.save, fh.ones(1),
      dir .. "/b\0c")
    assert.same({ "a" }, ls(dir))
  end)

  it("saving into a missing directory", function()
    io_error("fh.save", "^fh%.save: cannot create a temporary file next to '" .. escape(dir) ..
      "/no/f': No such file or directory$", fh.save, fh.ones(1), dir .. "/no/f")
    assert.same({}, ls(dir))
    -- a regular file where a directory should be
    fh.save(fh.ones(1), dir .. "/file")
    io_error("fh.save", "^fh%.save: cannot write '" .. escape(dir) .. "/file/x': Not a directory$", fh.save, fh.ones(1),
      dir .. "/file/x")
    io_error("fh.load", "^fh%.load: cannot open '" .. escape(dir) .. "/file/x': Not a directory$", fh.load, dir .. "/file/x")
    assert.same({ "file" }, ls(dir))
  end)

  it("saving onto a directory: the rename fails (overwrite=true) or it is refused (overwrite=false)", function()
    local target = dir .. "/d"
    assert.is_true(sh_ok("mkdir " .. cli.quote(target)))
    io_error("fh.save", "^fh%.save: cannot rename the temporary file onto '" .. escape(target) .. "': Is a directory$",
      fh.save, fh.ones(3), target, { overwrite = true })
    io_error("fh.save", "^fh%.save: cannot write '" .. escape(target) .. "': Is a directory$", fh.save, fh.ones(3), target)
    assert.same({ "d" }, ls(dir)) -- no temporary file left behind
    assert.same({}, ls(target))
  end)

  it("saving onto a FIFO or a device is refused and leaves it in place", function()
    local fifo = dir .. "/pipe"
    assert.is_true(sh_ok("mkfifo " .. cli.quote(fifo)))
    for _, overwrite in ipairs { false, true } do
      io_error("fh.save", "^fh%.save: cannot replace '" .. escape(fifo) .. "': it is a FIFO %(named pipe%), not a regular file$",
        fh.save, fh.ones(1), fifo, { overwrite = overwrite })
    end
    assert.is_true(sh_ok("test -p " .. cli.quote(fifo)))
    assert.same({ "pipe" }, ls(dir))
    -- /dev/full: a save never writes into its target (it renames a
    -- temporary file over it), so a device is refused before a temporary
    -- file could appear in /dev
    io_error("fh.save", "^fh%.save: cannot replace '/dev/full': it is a character device, not a regular file$", fh.save,
      fh.ones(1), "/dev/full", { overwrite = true })
    assert.is_true(sh_ok("test -c /dev/full"))
    assert.equal("", io.popen("ls -A /dev | grep '^full\\.tmp' || true"):read("*a"))
  end)

  -- root bypasses permission bits: the permission specs then run in a
  -- child dropped to nobody (setpriv), or are skipped with the reason
  local as_nobody, why_not
  if is_root() then
    local probe = cli.sh("setpriv --reuid=65534 --regid=65534 --clear-groups -- " .. cli.quote(cli.bin) ..
      " -e " .. cli.quote("require 'fhelium' print('ok')"))
    if probe.stdout:match("^ok") then
      as_nobody = true
    else
      why_not = "running as root, which bypasses permission bits, and cannot drop to nobody with setpriv (" ..
        (probe.stderr:match("[^\n]*") or "") .. ")"
    end
  end

  -- run `body` with permissions enforced: here, or in a child as nobody
  local function with_permissions(body)
    if not is_root() then
      local ok, err = pcall(loadstring("local fh = require 'fhelium' " .. body))
      if ok then return "OK", "no error" end
      return err.kind, err.message
    end
    local r = cli.sh("setpriv --reuid=65534 --regid=65534 --clear-groups -- " .. cli.quote(cli.bin) .. " -e " ..
      cli.quote(child_code(body)))
    return child_result(r)
  end

  local function perm_it(name, fn)
    if is_root() and not as_nobody then return pending(name .. " (skipped: " .. why_not .. ")") end
    it(name .. (is_root() and " (in a child process as nobody: root bypasses permissions)" or ""), fn)
  end

  perm_it("saving into a directory without write permission", function()
    local ro = dir .. "/ro"
    assert.is_true(sh_ok("mkdir " .. cli.quote(ro) .. " && chmod 555 " .. cli.quote(ro)))
    local kind, msg = with_permissions(("fh.save(fh.ones(2), %q)"):format(ro .. "/x"))
    assert.equal("IOError", kind)
    assert.equal("fh.save: cannot create a temporary file next to '" .. ro .. "/x': Permission denied", msg)
    assert.same({}, ls(ro))
  end)

  perm_it("loading a file without read permission", function()
    local p = dir .. "/secret.safetensors"
    fh.save(fh.ones(2), p)
    assert.is_true(sh_ok("chmod 000 " .. cli.quote(p)))
    local kind, msg = with_permissions(("fh.load(%q)"):format(p))
    assert.equal("IOError", kind)
    assert.equal("fh.load: cannot open '" .. p .. "': Permission denied", msg)
  end)

  it("a write that fails (the file size limit: EFBIG) raises IOError and leaves no temporary file", function()
    -- RLIMIT_FSIZE through the shell's ulimit, SIGXFSZ ignored so that
    -- write() fails instead of killing the process
    local body = ("fh.save(fh.zeros({1000000}, {dtype = 'uint8'}), %q)"):format(dir .. "/big")
    local r = cli.sh("sh -c " .. cli.quote("ulimit -f 64; trap '' XFSZ; exec " .. cli.quote(cli.bin) .. " -e " ..
      cli.quote(child_code(body))))
    local kind, msg = child_result(r)
    assert.equal("IOError", kind, r.stdout .. r.stderr)
    assert.equal("fh.save: cannot write '" .. dir .. "/big': File too large", msg)
    assert.same({}, ls(dir))
  end)

  -- a full disk: a tiny tmpfs in a private mount namespace (needs root and
  -- CAP_SYS_ADMIN); /dev/full cannot serve, a save never writes into its target
  local function can_mount()
    if not is_root() then return false, "mounting a small tmpfs needs root" end
    local r = cli.sh("unshare -m sh -c 'd=$(mktemp -d) && mount -t tmpfs -o size=64k tmpfs \"$d\" && umount \"$d\" && rmdir \"$d\"'")
    if r.code ~= 0 then return false, "cannot mount a tmpfs in a private mount namespace (" .. (r.stderr:match("[^\n]*") or "") .. ")" end
    return true
  end
  local mount_ok, mount_why = can_mount()
  local disk_it = mount_ok and it or function(name) pending(name .. " (skipped: " .. mount_why .. ")") end
  disk_it("a full disk (ENOSPC on a 64 KiB tmpfs) raises IOError and leaves no temporary file", function()
    local mnt = dir .. "/mnt"
    assert.is_true(sh_ok("mkdir " .. cli.quote(mnt)))
    local body = ("fh.save(fh.zeros({200000}, {dtype = 'uint8'}), %q)"):format(mnt .. "/x")
    local script = cli.tempfile(child_code(body) .. ("for f in io.popen('ls -A %s'):lines() do print('left: ' .. f) end\n"):format(mnt))
    local r = cli.sh("unshare -m sh -c " .. cli.quote("mount -t tmpfs -o size=64k tmpfs " .. cli.quote(mnt) ..
      " && exec " .. cli.quote(cli.bin) .. " " .. cli.quote(script)))
    os.remove(script)
    local kind, msg, lines = child_result(r)
    assert.equal("IOError", kind, r.stdout .. r.stderr)
    assert.equal("fh.save: cannot write '" .. mnt .. "/x': No space left on device", msg)
    assert.equal(2, #lines, "files left behind: " .. r.stdout)
  end)

  -- a short read: a sysfs attribute says 4096 bytes but holds a few
  local function short_file()
    for _, p in ipairs { "/sys/kernel/mm/ksm/run", "/sys/kernel/mm/ksm/merge_across_nodes", "/sys/kernel/profiling",
      "/sys/kernel/mm/transparent_hugepage/use_zero_page", "/sys/kernel/mm/transparent_hugepage/khugepaged/defrag" } do
      local f = io.open(p, "rb")
      if f then
        local s = f:read("*a") or ""
        f:close()
        local st = io.popen("stat -L -c %s " .. cli.quote(p) .. " 2>/dev/null"):read("*l")
        if #s < 8 and tonumber(st) and tonumber(st) >= 8 then return p, #s, tonumber(st) end
      end
    end
  end
  local sp, slen, ssize = short_file()
  local short_it = sp and it or function(name) pending(name .. " (skipped: no sysfs attribute shorter than its size here)") end
  short_it("a short read (a file shorter than its size) raises IOError", function()
    io_error("fh.load", "^fh%.load: cannot read '" .. escape(sp) .. "': unexpected end of file at byte " .. slen ..
      " %(the file is shorter than its size, " .. ssize .. " bytes, said%)$", fh.load, sp)
  end)
end)
