"""The model: its architecture and loss, its size, the base every run starts from, its
pretraining loop and the Hugging Face export."""
