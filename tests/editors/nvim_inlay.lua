-- Headless neovim shows fuse-all's per-line profile: start fuse-all-lsp, enable inlay hints the way a
-- user does (vim.lsp.inlay_hint.enable), let neovim draw them, and write what it drew to a JSON file:
-- per buffer line, the screen row neovim drew for it (inlay hints are drawn as ephemeral extmarks, so
-- the screen is where they are), and the hints neovim holds (vim.lsp.inlay_hint.get).
-- Arguments come as JSON in $FUSE_ALL_NVIM_TEST: python, file, root, artifact_dir, out.
local here = vim.fs.dirname(debug.getinfo(1, 'S').source:sub(2))
local session = dofile(vim.fs.joinpath(here, 'nvim_lsp_session.lua'))
local report = { drawn = {} }

local function drawn_hints(bufnr)
  vim.cmd('redraw!')
  local found = {}
  local window = vim.api.nvim_get_current_win()
  local last = math.min(vim.api.nvim_buf_line_count(bufnr), vim.api.nvim_win_get_height(window))
  for line = 1, last do
    local position = vim.fn.screenpos(window, line, 1)
    if position.row > 0 then
      local cells = {}
      for column = 1, vim.o.columns do
        table.insert(cells, vim.fn.screenstring(position.row, column))
      end
      found[tostring(line)] = table.concat(cells):gsub('%s+$', '')
    end
  end
  return found
end

vim.o.columns, vim.o.lines = 200, 60
session.run(report, function(_, bufnr)
  vim.lsp.inlay_hint.enable(true, { bufnr = bufnr })
  local shown = vim.wait(20000, function()
    vim.cmd.redraw()
    for _, text in pairs(drawn_hints(bufnr)) do
      if text:find('/call', 1, true) then
        return true
      end
    end
    return false
  end, 100)
  assert(shown, 'no profile inlay hint was drawn within 20 s')
  report.drawn = drawn_hints(bufnr)
  report.held = {}
  for _, item in ipairs(vim.lsp.inlay_hint.get({ bufnr = bufnr })) do
    local label = item.inlay_hint.label
    if type(label) == 'table' then
      local parts = {}
      for _, part in ipairs(label) do table.insert(parts, part.value) end
      label = table.concat(parts)
    end
    table.insert(report.held, { line = item.inlay_hint.position.line + 1, label = label })
  end
end)
