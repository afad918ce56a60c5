"""Quality under a budget: tfformer against keras-hub and published recipes."""
