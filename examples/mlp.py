"""A small MLP: Linear → ReLU → Linear → GELU → Linear, batch of 4."""
import torch
from torch import nn


class MLP(nn.Module):
    def __init__(self, features: int = 64, hidden: int = 256, classes: int = 10):
        super().__init__()
        self.fc1 = nn.Linear(features, hidden)
        self.fc2 = nn.Linear(hidden, hidden)
        self.fc3 = nn.Linear(hidden, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.relu(self.fc1(x))
        x = nn.functional.gelu(self.fc2(x))
        return self.fc3(x)


def get_model():
    torch.manual_seed(0)
    return MLP().eval(), (torch.randn(4, 64),)
