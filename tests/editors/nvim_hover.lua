-- Headless neovim as a user's editor: start fuse-all-lsp with vim.lsp.start, open the file, hover
-- the way `K` does (vim.lsp.buf.hover) and write what the hover window shows to a JSON file.
-- Arguments come as JSON in $FUSE_ALL_NVIM_TEST: python, file, root, artifact_dir, line, character, out.
local here = vim.fs.dirname(debug.getinfo(1, 'S').source:sub(2))
local session = dofile(vim.fs.joinpath(here, 'nvim_lsp_session.lua'))
local report = {}

session.run(report, function(args, bufnr, client_id)
  report.server_name = vim.lsp.get_client_by_id(client_id).server_info.name

  vim.api.nvim_win_set_cursor(0, { args.line, args.character })
  local windows_before = #vim.api.nvim_list_wins()
  vim.lsp.buf.hover()
  local opened = vim.wait(15000, function() return #vim.api.nvim_list_wins() > windows_before end, 50)
  assert(opened, 'no hover window opened within 15 s')
  for _, win in ipairs(vim.api.nvim_list_wins()) do
    if vim.api.nvim_win_get_config(win).relative ~= '' then
      local lines = vim.api.nvim_buf_get_lines(vim.api.nvim_win_get_buf(win), 0, -1, false)
      report.hover_window = table.concat(lines, '\n')
      report.hover_filetype = vim.bo[vim.api.nvim_win_get_buf(win)].filetype
    end
  end

  local lenses = vim.lsp.buf_request_sync(bufnr, 'textDocument/codeLens',
    { textDocument = vim.lsp.util.make_text_document_params(bufnr) }, 10000)
  report.code_lens_titles = {}
  for _, response in pairs(lenses or {}) do
    for _, lens in ipairs(response.result or {}) do
      table.insert(report.code_lens_titles, lens.command and lens.command.title or '')
    end
  end
end)
