"""The model: the forward pass as one top-to-bottom story, recording, interventions, the weights cache, runtime choices."""
