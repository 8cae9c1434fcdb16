"""The seeds' own code (../shared/seeds/), fixed only where it crashed, as independent references.

Each class is the seed's answer as written, with the minimum change needed to run; the changes are
marked FIX. They are used as references for what the seed meant, never as attnzoo code.
"""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F


class Seed000Attention(nn.Module):
    """Seed 000, the 'simplified version' with the embedding length given up front."""

    def __init__(self, class_num, embedding_length):
        super().__init__()
        self.Ws = torch.nn.Parameter(torch.empty(class_num, embedding_length))
        torch.nn.init.xavier_uniform_(self.Ws)

    def forward(self, inputs):
        sentence_trans = inputs.permute(0, 2, 1)
        at = torch.matmul(self.Ws, sentence_trans)
        at = torch.tanh(at)
        at = torch.exp(at - torch.max(at, dim=-1, keepdims=True).values)
        at = at / torch.sum(at, dim=-1, keepdims=True)
        v = torch.einsum("ijk,ikl->ijl", at, inputs)
        return v


class Seed001SelfAttention(nn.Module):
    """Seed 001's answer: SelfAttentionLayer (three Linear layers, QK^T / sqrt(d), -1e9 mask)."""

    def __init__(self, feature_size):
        super().__init__()
        self.feature_size = feature_size
        self.key = nn.Linear(feature_size, feature_size)
        self.query = nn.Linear(feature_size, feature_size)
        self.value = nn.Linear(feature_size, feature_size)

    def forward(self, x, mask=None):
        keys = self.key(x)
        queries = self.query(x)
        values = self.value(x)
        scores = torch.matmul(queries, keys.transpose(-2, -1)) / torch.sqrt(
            torch.tensor(self.feature_size, dtype=x.dtype)  # FIX: was float32, breaks float64
        )
        if mask is not None:
            scores = scores.masked_fill(mask == 0, -1e9)
        attention_weights = F.softmax(scores, dim=-1)
        output = torch.matmul(attention_weights, values)
        return output, attention_weights


class Seed004MultiLabelAttention(nn.Module):
    """Seed 004's loop form (ParameterList of per-label Wa, shared Wo [h], sigmoid output)."""

    def __init__(self, hidden_size, num_labels, return_attention=False):
        super().__init__()
        self.num_labels = num_labels
        self.return_attention = return_attention
        self.Wa_list = nn.ParameterList([nn.Parameter(torch.randn(hidden_size)) for _ in range(num_labels)])
        self.Wo = nn.Parameter(torch.randn(hidden_size))
        self.bo = nn.Parameter(torch.randn(num_labels))

    def forward(self, x, mask=None):
        label_aware_reps = []
        attention_scores = []
        for Wa in self.Wa_list:
            ai = torch.matmul(x, Wa)
            if mask is not None:
                ai = ai.masked_fill(mask == 0, -1e9)
            ai = F.softmax(ai, dim=1)
            label_rep = torch.bmm(ai.unsqueeze(1), x).squeeze(1)
            label_aware_reps.append(label_rep)
            if self.return_attention:
                attention_scores.append(ai)
        label_aware_reps = torch.stack(label_aware_reps, dim=1)
        label_scores = torch.sum(label_aware_reps * self.Wo, dim=-1) + self.bo
        label_scores = torch.sigmoid(label_scores)
        if self.return_attention:
            return label_scores, torch.stack(attention_scores, dim=1)
        return label_scores


class Seed003Attention(nn.Module):
    """Seed 003's score module, FIXED where it crashed or was wrong, as the issue describes:
    'add' gets its v and broadcasts [B, Tq, 1, d] + [B, 1, Tk, d]; 'mul' applies W [dq, dk] to the query
    side correctly. Kept: the 1/sqrt(d) on 'mul' only (the seed's choice), no mask."""

    def __init__(self, query_size, key_size, score_method):
        super().__init__()
        self.score_method = score_method
        if score_method == "add":
            self.query_transform = nn.Linear(query_size, key_size, bias=False)
            self.key_transform = nn.Linear(key_size, key_size, bias=False)
            self.v = nn.Parameter(torch.randn(key_size))  # FIX: Bahdanau's v was missing
        elif score_method == "mul":
            self.transform = nn.Linear(query_size, key_size, bias=False)  # FIX: sized for the query
            self.scaling_factor = key_size**-0.5

    def forward(self, query, key):
        if self.score_method == "dot":
            scores = torch.matmul(query, key.permute(0, 2, 1))
        elif self.score_method == "add":
            q = self.query_transform(query).unsqueeze(2)  # FIX: broadcast over (i, j)
            k = self.key_transform(key).unsqueeze(1)
            scores = torch.matmul(torch.tanh(q + k), self.v)
        else:
            transformed_query = self.transform(query)
            scores = torch.matmul(transformed_query, key.permute(0, 2, 1))
            scores = scores.mul_(self.scaling_factor)
        return scores.softmax(dim=-1)
