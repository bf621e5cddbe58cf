-- fhelium.test_output: the busted output handler of `fhelium test` and
-- scripts/test (busted --output=fhelium.test_output): the usual terminal
-- report, then the skipped specs (busted's pendings: gpu specs without a
-- GPU, specs that need a tool that is missing...) grouped by reason, then
-- the plain closing line "N passed, N failed, N skipped" (CI parses it; it
-- stays the last line).
--
-- Each skip is named by the spec file and line that declared it (the `it`
-- that called `pending`, or the line that called testing.skip_it /
-- testing.gpu_it, never a helper module). By default one line per reason
-- with its count; FHELIUM_TEST_VERBOSE=1 (or `--verbose-skips`, which sets
-- M.verbose) lists every skip under its reason as file:line and name.
--
-- The reason of a skip: the text inside "(skipped: ...)" at the end of its
-- name (testing.skip_it writes it so), else the message given to `pending`
-- inside a running spec, else "no reason given".
local M = {}

--- List every skip with its file and line (`fhelium test --verbose-skips`);
--- FHELIUM_TEST_VERBOSE=1 does the same.
M.verbose = false

--- Reason, name and location ("file:line") of one pending as busted's base
--- handler records it ({name=, message=, trace=, element={trace=}}).
function M.describe(p)
  local name = p.name or "?"
  local reason
  local head, why = name:match("^(.-)%s*%(skipped: (.*)%)$")
  if head then
    name, reason = head, why
  elseif type(p.message) == "string" and p.message ~= "" then
    -- busted prefixes the message with where `pending` was raised
    reason = p.message:gsub("^[^\n:]+:%d+: ", "")
  else
    reason = "no reason given"
  end
  -- the declaration (an `it` or a registered pending) is where the spec
  -- lives; p.trace is where `pending` was raised, which can be busted itself
  local tr = (p.element and p.element.trace) or p.trace or {}
  local src = (tr.short_src or "?"):gsub("^%./", "")
  return reason, name, ("%s:%s"):format(src, tostring(tr.currentline or "?"))
end

--- The lines of the skip report for a list of pendings: "Skipped: N", then
--- per reason (in order of first appearance) "  <count> x <reason>", and
--- with `verbose` each skip under it as "      <file:line>  <name>".
function M.report(pendings, verbose)
  if #pendings == 0 then return {} end
  local order, groups = {}, {}
  for _, p in ipairs(pendings) do
    local reason, name, where = M.describe(p)
    local g = groups[reason]
    if not g then
      g = { reason = reason, items = {} }
      groups[reason] = g
      order[#order + 1] = g
    end
    g.items[#g.items + 1] = { name = name, where = where }
  end
  local lines = { ("Skipped: %d"):format(#pendings) }
  for _, g in ipairs(order) do
    lines[#lines + 1] = ("  %d x %s"):format(#g.items, g.reason)
    if verbose then
      for _, it in ipairs(g.items) do lines[#lines + 1] = ("      %s  %s"):format(it.where, it.name) end
    end
  end
  if not verbose then
    lines[#lines + 1] = "  (--verbose-skips or FHELIUM_TEST_VERBOSE=1 lists each skipped spec with its file and line)"
  end
  return lines
end

local function handler_factory(options)
  local busted = require "busted"
  -- fhelium.testing, loaded before busted started, follows it from now on
  local testing = package.loaded["fhelium.testing"]
  if type(testing) == "table" and testing._attach then testing._attach() end
  local istty = os.getenv("TERM") and os.getenv("TERM") ~= "dumb" and os.getenv("CI") == nil
  local base = istty and "utfTerminal" or "plainTerminal"
  local handler = require("busted.outputHandlers." .. base)(options)
  local env = os.getenv("FHELIUM_TEST_VERBOSE") or ""
  local verbose = M.verbose or (env ~= "" and env ~= "0")
  local subscribe = handler.subscribe
  handler.subscribe = function(self, opts)
    subscribe(self, opts)
    local pendings = {}
    -- first at suite end: take the pendings away from the base handler,
    -- which would list each one as "Pending -> <trace>" (busted's trace of
    -- a pending declared through a helper names the helper)
    busted.subscribe({ "suite", "end" }, function()
      pendings = handler.pendings
      handler.pendings = {}
      return nil, true
    end, { priority = 1 })
    busted.subscribe({ "suite", "end" }, function()
      local lines = M.report(pendings, verbose)
      if #lines > 0 then io.write("\n", table.concat(lines, "\n"), "\n") end
      local failed = handler.failuresCount + handler.errorsCount
      io.write(("\n%d passed, %d failed, %d skipped\n"):format(handler.successesCount, failed,
        handler.pendingsCount))
      io.flush()
      return nil, true
    end, { priority = 100 })
  end
  return handler
end

-- busted loads an output handler with require-like semantics and calls the
-- result; the module table is callable so that specs can reach M.report.
return setmetatable(M, { __call = function(_, options) return handler_factory(options) end })
