"""creditaudit.training_arms"""
