"""memfit: will this local LLM fit in this machine's memory, and how sure are we?"""
