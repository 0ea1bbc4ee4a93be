"""tinyformer: a from-scratch Transformer lab in PyTorch.

Importing the package stays light: submodules load torch, and plotting or
TensorBoard are imported only inside the functions that use them.
"""

from tinyformer.attention.masks import causal as causal_mask
from tinyformer.attention.multihead import MultiHeadAttention, attend
from tinyformer.config import DataConfig, RunConfig, SampleConfig, TrainConfig
from tinyformer.data.subword import SubwordTokenizer
from tinyformer.data.tokenizers import CharTokenizer
from tinyformer.errors import UserError
from tinyformer.generate.decoding import beam_search, greedy_decode
from tinyformer.generate.sampling import generate, generate_text
from tinyformer.models.bert import BertConfig, BertEncoder, BertForMaskedLM, load_hf_bert
from tinyformer.models.classifier import ClassifierConfig, TextClassifier
from tinyformer.models.cnn import TextCNN
from tinyformer.models.gpt import GPTConfig, MiniGPT, param_breakdown, param_count
from tinyformer.models.outputs import EncoderOutput, ModelOutput, Seq2SeqOutput
from tinyformer.models.rnn import RNNEncoder
from tinyformer.models.seq2seq import Seq2SeqConfig, Seq2SeqTransformer, build_seq2seq
from tinyformer.runs import Run, load_run
from tinyformer.tasks import TASKS, ClassifyTask, GPTTask, MLMTask, ReverseTask
from tinyformer.train.trainer import FitResult, Trainer
from tinyformer.viz.capture import AttentionMaps, capture_attention
from tinyformer.viz.roles import HeadRoles, head_roles

__version__ = "0.1.0"

__all__ = [
    "TASKS",
    "AttentionMaps",
    "BertConfig",
    "BertEncoder",
    "BertForMaskedLM",
    "ClassifierConfig",
    "ClassifyTask",
    "MLMTask",
    "RNNEncoder",
    "SubwordTokenizer",
    "TextClassifier",
    "TextCNN",
    "EncoderOutput",
    "HeadRoles",
    "capture_attention",
    "head_roles",
    "load_hf_bert",
    "ReverseTask",
    "beam_search",
    "greedy_decode",
    "Seq2SeqConfig",
    "Seq2SeqOutput",
    "Seq2SeqTransformer",
    "build_seq2seq",
    "CharTokenizer",
    "DataConfig",
    "FitResult",
    "GPTConfig",
    "GPTTask",
    "MiniGPT",
    "ModelOutput",
    "MultiHeadAttention",
    "Run",
    "RunConfig",
    "SampleConfig",
    "TrainConfig",
    "Trainer",
    "UserError",
    "attend",
    "causal_mask",
    "generate",
    "generate_text",
    "load_run",
    "param_breakdown",
    "param_count",
]
