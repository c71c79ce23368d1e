"""HuggingFace BERT with fuse_all (the guide's example).

The guide downloads a pretrained model (needs a network):
    tokenizer = BertTokenizer.from_pretrained('bert-base-uncased')
    model = BertModel.from_pretrained("bert-base-uncased").to(device="cuda:0")
    model = torch.compile(model, backend="fuse_all")  # the only changed line
    encoded_input = tokenizer("Replace me by any text you'd like.", return_tensors='pt').to(device="cuda:0")
    output = model(**encoded_input)
Offline, a randomly initialised BertModel(BertConfig()) on random token ids runs the same graph.
"""
import os

import torch
from transformers import BertConfig, BertModel

os.environ.setdefault("HF_HUB_OFFLINE", "1")
device = "cuda:0" if torch.cuda.is_available() else "cpu"
model = BertModel(BertConfig()).eval().to(device)
opt_model = torch.compile(model, backend="fuse_all")
encoded_input = {
    "input_ids": torch.randint(0, 30522, (1, 12), device=device),
    "attention_mask": torch.ones(1, 12, dtype=torch.int64, device=device),
    "token_type_ids": torch.zeros(1, 12, dtype=torch.int64, device=device),
}
with torch.no_grad():
    output = opt_model(**encoded_input)
    expected = model(**encoded_input)
torch.testing.assert_close(output.last_hidden_state, expected.last_hidden_state, rtol=1e-3, atol=1e-3)
print("bert last_hidden_state", tuple(output.last_hidden_state.shape), "matches eager")
